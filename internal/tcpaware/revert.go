package tcpaware

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// RFC 6069 (TCP-LD) lets a sender whose retransmission timer has backed off during a
// connectivity disruption undo one backoff step per ICMP Destination Unreachable that quotes
// its oldest unacknowledged segment, and retransmit at once when the undone timer has already
// run out. Linux implements it (tcp_ld_RTO_revert, also for ICMPv6 "no route to destination").
// At the end of a move ILNP knows the path is back, so the daemon hands TCP that very signal
// locally: a message to the socket's own address, built from what the iterator reported.
const (
	icmp6DestUnreach = 1
	icmp6NoRoute     = 0
	maxReverts       = 16
)

// TCP states (include/net/tcp_states.h) in which a Destination Unreachable only reverts the
// timer: tcp_v6_err's default case, connections past the handshake with data or a FIN in
// flight. In SYN_SENT and SYN_RECV the same message aborts the connection (tcp_done), so a
// connect that spans a move must never get one.
const (
	tcpEstablished = 1
	tcpFinWait1    = 4
	tcpCloseWait   = 8
	tcpLastAck     = 9
	tcpClosing     = 11
)

func revertable(state uint8) bool {
	switch state {
	case tcpEstablished, tcpFinWait1, tcpCloseWait, tcpLastAck, tcpClosing:
		return true
	}
	return false
}

// RevertMessage is the ICMPv6 Destination Unreachable (no route) quoting s's oldest
// unacknowledged segment: the 8-byte ICMPv6 header (checksum left to the kernel), the segment's
// IPv6 header and the first 20 bytes of its TCP header.
func RevertMessage(s Socket) []byte {
	b := make([]byte, 8+40+20)
	b[0], b[1] = icmp6DestUnreach, icmp6NoRoute
	ip := b[8:48]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], 20)
	ip[6], ip[7] = unix.IPPROTO_TCP, 64
	src, dst := s.Local.Addr().As16(), s.Remote.Addr().As16()
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])
	th := b[48:]
	binary.BigEndian.PutUint16(th[0:], s.Local.Port())
	binary.BigEndian.PutUint16(th[2:], s.Remote.Port())
	binary.BigEndian.PutUint32(th[4:], s.SndUna)
	th[12] = 5 << 4
	th[13] = 0x10 // ACK
	return b
}

// Reverts is how many revert messages undo all of s's backoff (0: nothing to undo, or a
// state in which the message would abort the connection instead).
func Reverts(s Socket) int {
	if !revertable(s.State) || s.Backoff == 0 || s.SndUna == s.SndNxt {
		return 0
	}
	return min(int(s.Backoff)+1, maxReverts)
}

// Revert sends Reverts(s) revert messages for each socket to the socket's own address, from
// the calling thread's network namespace. It returns how many it sent.
func Revert(socks []Socket) (int, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return 0, fmt.Errorf("tcpaware: ICMPv6 socket: %w", err)
	}
	defer unix.Close(fd)
	sent := 0
	for _, s := range socks {
		n := Reverts(s)
		if n == 0 {
			continue
		}
		msg := RevertMessage(s)
		to := &unix.SockaddrInet6{Addr: s.Local.Addr().As16()}
		for range n {
			if err := unix.Sendto(fd, msg, 0, to); err != nil {
				return sent, fmt.Errorf("tcpaware: revert message to %s: %w", s.Local, err)
			}
			sent++
		}
	}
	return sent, nil
}
