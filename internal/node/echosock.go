package node

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"

	"golang.org/x/net/ipv6"
)

// echoSocket is a raw ICMPv6 socket that receives only Echo Replies and sends Echo Requests
// under one random identifier, so that each user (locator challenges, path probes) reads only
// its own answers.
type echoSocket struct {
	conn *net.IPConn
	pc   *ipv6.PacketConn
	id   uint16
}

// openEchoSocket opens one; purpose names it in errors.
func openEchoSocket(purpose string) (*echoSocket, error) {
	c, err := net.ListenPacket("ip6:ipv6-icmp", "::")
	if err != nil {
		return nil, fmt.Errorf("raw ICMPv6 socket for %s: %w", purpose, err)
	}
	conn := c.(*net.IPConn)
	pc := ipv6.NewPacketConn(conn)
	var filter ipv6.ICMPFilter
	filter.SetAll(true)
	filter.Accept(ipv6.ICMPTypeEchoReply)
	if err := pc.SetICMPFilter(&filter); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: ICMPv6 filter: %w", purpose, err)
	}
	var id [2]byte
	if _, err := rand.Read(id[:]); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: echo identifier: %w", purpose, err)
	}
	return &echoSocket{conn: conn, pc: pc, id: binary.BigEndian.Uint16(id[:])}, nil
}

func (s *echoSocket) Close() error { return s.conn.Close() }
