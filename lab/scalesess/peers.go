package scalesess

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/internal/wire"
	"ilnp/lab/attack"
	"ilnp/lab/netns"
)

// The correspondents one namespace plays: every one an I-LV of its own with its own nonce,
// its packets forged by lab/attack and sent through one raw socket, the packets to all of
// them read from one AF_PACKET socket.

// Identifier blocks: the CN's correspondents (they open sessions to the CN and move) and the
// MN's (they open sessions to the MN, which moves). The index is the low 32 bits.
const (
	cnPeerBase wire.NID = 0x0a5c_0000_0000_0000
	mnPeerBase wire.NID = 0x0a5d_0000_0000_0000
	blockMask  wire.NID = 0xffff_ffff_0000_0000
)

// group is a block of correspondents.
type group struct {
	base   wire.NID
	nonces []wire.Nonce
	// ackNs[i] is when the LU-ACK to correspondent i arrived (monotonic ns since the engine
	// started, 0 none); luNs[i] when its LU left.
	luNs, ackNs []atomic.Int64
}

func newGroup(base wire.NID, n int) (*group, error) {
	g := &group{base: base, nonces: make([]wire.Nonce, n), luNs: make([]atomic.Int64, n), ackNs: make([]atomic.Int64, n)}
	for i := range g.nonces {
		var err error
		if g.nonces[i], err = wire.RandomNonce(4); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (g *group) nid(i int) wire.NID { return g.base | wire.NID(i) }

// index is i for the group's NID i, or -1.
func (g *group) index(n wire.NID) int {
	if n&blockMask != g.base {
		return -1
	}
	i := int(n &^ blockMask)
	if i >= len(g.nonces) {
		return -1
	}
	return i
}

// peers is the engine in the peers namespace.
type peers struct {
	raw     int // IPPROTO_RAW: whole IPv6 packets
	pkt     int // AF_PACKET on the link to R1
	start   time.Time
	cn, mn  *group
	mnLocs  wire.L64 // where the MN's correspondents are
	mu      sync.Mutex
	sendErr error

	lusSeen, acksSent, echoes, luAcks, sendFailed atomic.Int64
	done                                          chan struct{}
}

func openPeers(ns *netns.NS, ifname string, cn, mn *group) (*peers, error) {
	p := &peers{cn: cn, mn: mn, start: time.Now(), raw: -1, pkt: -1, done: make(chan struct{})}
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		if p.raw, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_RAW); err != nil {
			return fmt.Errorf("raw socket: %w", err)
		}
		if err := unix.SetsockoptInt(p.raw, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20); err != nil {
			return fmt.Errorf("raw socket buffer: %w", err)
		}
		if p.pkt, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_IPV6))); err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		if err := unix.SetsockoptInt(p.pkt, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20); err != nil {
			return fmt.Errorf("packet socket buffer: %w", err)
		}
		// Inbound only: our own packets leaving on the link are no business of ours.
		return unix.Bind(p.pkt, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IPV6), Ifindex: ifi.Index})
	})
	if err != nil {
		p.close()
		return nil, fmt.Errorf("correspondents in %s: %w", ns.Name, err)
	}
	go p.read()
	return p, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (p *peers) now() int64 { return int64(time.Since(p.start)) }

func (p *peers) close() {
	if p.pkt >= 0 {
		// Shutdown wakes the reader's blocking recvfrom; then the descriptor goes.
		_ = unix.Shutdown(p.pkt, unix.SHUT_RDWR)
		_ = unix.SetsockoptTimeval(p.pkt, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 1000})
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
		}
		unix.Close(p.pkt)
	}
	if p.raw >= 0 {
		unix.Close(p.raw)
	}
}

// send writes one whole IPv6 packet.
func (p *peers) send(pkt []byte) error {
	var dst [16]byte
	copy(dst[:], pkt[24:40])
	for {
		err := unix.Sendto(p.raw, pkt, 0, &unix.SockaddrInet6{Addr: dst})
		if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		if err != nil {
			p.sendFailed.Add(1)
		}
		return err
	}
}

// pace sends count packets made by mk at rate per second (in 1 ms slots, so that 10,000 a
// second are 10 a slot rather than a timer per packet) and returns how many left.
func (p *peers) pace(ctx context.Context, count, rate int, mk func(i int) ([]byte, error)) (int, error) {
	begin := time.Now()
	sent := 0
	for sent < count {
		due := min(count, int(float64(rate)*time.Since(begin).Seconds())+1)
		for ; sent < due; sent++ {
			pkt, err := mk(sent)
			if err != nil {
				return sent, err
			}
			if pkt == nil {
				continue
			}
			if err := p.send(pkt); err != nil {
				return sent, fmt.Errorf("packet %d: %w", sent, err)
			}
		}
		select {
		case <-ctx.Done():
			return sent, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return sent, nil
}

// read handles every packet to a correspondent until the socket closes: LU-ACKs are stamped,
// the MN's LUs answered, Echo Requests (locator challenges, path probes) answered.
func (p *peers) read() {
	defer close(p.done)
	buf := make([]byte, 65536)
	for {
		n, _, err := unix.Recvfrom(p.pkt, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if n == 0 {
			return
		}
		p.handle(buf[:n])
	}
}

func (p *peers) handle(b []byte) {
	h, err := wire.ParseIPv6Header(b)
	if err != nil {
		return
	}
	next, off := h.NextHeader, wire.IPv6HeaderLen
	for i := 0; i < 4 && (next == wire.ProtoHopByHop || next == wire.ProtoDestOpts); i++ {
		if len(b) < off+2 {
			return
		}
		next, off = b[off], off+8*(int(b[off+1])+1)
	}
	if next != wire.ProtoICMPv6 || len(b) < off+8 {
		return
	}
	end := wire.IPv6HeaderLen + int(h.PayloadLen)
	if end > len(b) || end < off {
		return
	}
	msg := b[off:end]
	dst, err := wire.ILVFromAddr(h.Dst)
	if err != nil {
		return
	}
	src, err := wire.ILVFromAddr(h.Src)
	if err != nil {
		return
	}
	g, i := p.cn, p.cn.index(dst.NID)
	if i < 0 && p.mn != nil {
		g, i = p.mn, p.mn.index(dst.NID)
	}
	if i < 0 {
		return
	}
	switch msg[0] {
	case 128: // Echo Request: answer it as the correspondent's kernel would
		reply, err := attack.EchoAnswer(dst, src, g.nonces[i], msg)
		if err == nil && p.send(reply) == nil {
			p.echoes.Add(1)
		}
	case wire.ICMPv6TypeLocatorUpdate:
		lu, err := wire.ParseLocatorUpdate(msg, h.Src, h.Dst, wire.LUParseOptions{})
		if err != nil {
			return
		}
		switch lu.Op {
		case wire.OpAcknowledgement:
			p.luAcks.Add(1)
			g.ackNs[i].CompareAndSwap(0, p.now())
		case wire.OpAdvertisement:
			p.lusSeen.Add(1)
			g.luNs[i].CompareAndSwap(0, p.now())
			ack, err := attack.Acknowledge(dst, src, lu, g.nonces[i])
			if err == nil && p.send(ack) == nil {
				p.acksSent.Add(1)
				g.ackNs[i].CompareAndSwap(0, p.now())
			}
		}
	}
}

// opener is a datagram from correspondent i of g at loc to the echo service at dst: the first
// opens the session, the second proves the correspondent is there.
func opener(g *group, i int, loc wire.L64, dst netip.Addr, port uint16, what string) ([]byte, error) {
	d, err := wire.ILVFromAddr(dst)
	if err != nil {
		return nil, err
	}
	payload := make([]byte, 16)
	binary.BigEndian.PutUint64(payload, uint64(g.nid(i)))
	copy(payload[8:], what)
	return attack.UDP(wire.ILV{Locator: loc, NID: g.nid(i)}, d, g.nonces[i], 40000+uint16(i%20000), port, payload), nil
}
