package attack

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/internal/wire"
	"ilnp/lab"
	"ilnp/lab/netns"
)

// luUnknownSession: LUs from made-up NIDs with random nonces, each announcing the attacker
// network's prefix (issue 23 item 3). An LU never opens a session, so the CN must hold no
// session with any of them, no route to them, and must not acknowledge one (a reflector).
func (l *labRun) luUnknownSession() attack {
	cn := l.t.CN
	var mu sync.Mutex
	var nids []wire.NID
	var acks0 uint64
	return attack{name: "lu-unknown-session", from: "atk (behind R1), made-up NIDs and nonces", attacker: l.atk,
		counters: []string{"CN dp_ingress_lu_no_session"}, count: l.statSum(cn, l.cnSock, "dp_ingress_lu_no_session"),
		packet: func(int) ([]byte, error) {
			nid, err := wire.RandomNID()
			if err != nil {
				return nil, err
			}
			n, err := randomNonce()
			if err != nil {
				return nil, err
			}
			mu.Lock()
			nids = append(nids, nid)
			mu.Unlock()
			return LocatorUpdate(wire.ILV{Locator: mustL64(atkPrefix), NID: nid}, l.cnAddr, wire.OpAdvertisement,
				[]wire.L64{mustL64(atkPrefix)}, n)
		},
		measured: "sessions in the CN's ILCC and routes on the CN to the made-up NIDs, plus LU-ACKs it sent (lu_ack_sent)",
		prepare: func() error {
			s, err := l.stats(cn, l.cnSock)
			acks0 = s["lu_ack_sent"]
			return err
		},
		accepted: func() (int, error) {
			s, err := l.stats(cn, l.cnSock)
			if err != nil {
				return 0, err
			}
			n := int(s["lu_ack_sent"] - acks0)
			rows, err := l.sessions(cn, l.cnSock)
			if err != nil {
				return 0, err
			}
			routes, err := cn.Run("ip", "-6", "route", "show", "table", "all")
			if err != nil {
				return 0, err
			}
			mu.Lock()
			defer mu.Unlock()
			for _, nid := range nids {
				if _, ok := sessionOf(rows, nid.String()); ok {
					n++
				}
				if strings.Contains(routes, (wire.ILV{Locator: mustL64(atkPrefix), NID: nid}).Addr().String()) {
					n++
				}
			}
			return n, nil
		}}
}

// statSum reads the sum of a daemon's named stats.
func (l *labRun) statSum(ns *netns.NS, sock string, names ...string) func() (uint64, error) {
	return func() (uint64, error) {
		s, err := l.stats(ns, sock)
		if err != nil {
			return 0, err
		}
		var sum uint64
		for _, n := range names {
			sum += s[n]
		}
		return sum, nil
	}
}

// luReplay: the MN moves (L3 joins, then L2 goes) and the CN applies both LUs; an attacker on
// the path captured the first, which still lists L2, and replays it (issue 23 item 4). The
// CN must apply none of the copies (the same body after a newer one), and the flow stays on
// L3. Afterwards the MN moves back to L2 for the attacks that follow: the genuine move back
// is applied (a new LU; L2 is verified again).
func (l *labRun) luReplay() attack {
	cn, mn := l.t.CN, l.t.MN
	var captured []byte
	var before map[string]uint64
	var sessBefore sessionRow
	waitApplied := func(what string, since uint64) (uint64, error) {
		for deadline := time.Now().Add(15 * time.Second); ; {
			s, err := l.stats(cn, l.cnSock)
			if err != nil {
				return 0, err
			}
			if s["lu_applied"] > since {
				return s["lu_applied"], nil
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("the CN applied no LU within 15 s of %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	move := func(steps ...[2]string) error {
		s, err := l.stats(cn, l.cnSock)
		if err != nil {
			return err
		}
		applied := s["lu_applied"]
		for _, st := range steps {
			if _, err := mn.Run("ip", "link", "set", st[0], st[1]); err != nil {
				return err
			}
			if applied, err = waitApplied(st[0]+" "+st[1], applied); err != nil {
				return err
			}
		}
		return nil
	}
	return attack{name: "lu-replay", from: "atk (behind R1), replaying the MN's LU captured on the CN's link", attacker: l.atk,
		counters: []string{"CN lu_replayed"}, count: l.statSum(cn, l.cnSock, "lu_replayed"),
		packet:   func(int) ([]byte, error) { return captured, nil },
		measured: "LUs the CN's ILCC applied (lu_applied) or ACKed (lu_ack_sent), or a change of its session",
		prepare: func() error {
			sn, err := newLUSniffer(cn, lab.IfCN, l.mnAddr.NID)
			if err != nil {
				return err
			}
			defer sn.close()
			if err := move([2]string{lab.IfMNR3, "up"}, [2]string{lab.IfMNR2, "down"}); err != nil {
				return err
			}
			if captured, err = sn.first(l.mnAddr.Locator); err != nil {
				return err
			}
			if before, err = l.stats(cn, l.cnSock); err != nil {
				return err
			}
			rows, err := l.sessions(cn, l.cnSock)
			if err != nil {
				return err
			}
			var ok bool
			if sessBefore, ok = sessionOf(rows, l.mnAddr.NID.String()); !ok {
				return fmt.Errorf("the CN has no session with the MN")
			}
			return nil
		},
		accepted: func() (int, error) {
			s, err := l.stats(cn, l.cnSock)
			if err != nil {
				return 0, err
			}
			n := int(s["lu_applied"]-before["lu_applied"]) + int(s["lu_ack_sent"]-before["lu_ack_sent"])
			rows, err := l.sessions(cn, l.cnSock)
			if err != nil {
				return 0, err
			}
			now, ok := sessionOf(rows, l.mnAddr.NID.String())
			if n == 0 && (!ok || now.ActiveRemote != sessBefore.ActiveRemote || now.RemoteLocators != sessBefore.RemoteLocators) {
				n = 1
			}
			return n, nil
		},
		finish: func() error { return move([2]string{lab.IfMNR2, "up"}, [2]string{lab.IfMNR3, "down"}) },
	}
}

// luSniffer captures the Locator Updates (advertisements, with their nonce) from one NID that
// cross an interface.
type luSniffer struct {
	fd    int
	nid   wire.NID
	mu    sync.Mutex
	got   [][]byte
	seen  int            // IPv6 packets read
	kinds map[string]int // what the packets from the NID were (for the error)
	done  chan struct{}
	wg    sync.WaitGroup
}

func newLUSniffer(ns *netns.NS, ifname string, nid wire.NID) (*luSniffer, error) {
	s := &luSniffer{nid: nid, done: make(chan struct{}), kinds: map[string]int{}}
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		if s.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_IPV6))); err != nil {
			return err
		}
		return unix.Bind(s.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IPV6), Ifindex: ifi.Index})
	}); err != nil {
		if s.fd > 0 {
			unix.Close(s.fd)
		}
		return nil, fmt.Errorf("LU sniffer on %s: %w", ifname, err)
	}
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(s.fd)
		return nil, err
	}
	s.wg.Add(1)
	go s.loop()
	return s, nil
}

func (s *luSniffer) loop() {
	defer s.wg.Done()
	buf := make([]byte, 2048)
	for {
		select {
		case <-s.done:
			return
		default:
		}
		k, _, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil || k > len(buf) {
			continue
		}
		pkt := buf[:k]
		s.mu.Lock()
		s.seen++
		if h, err := wire.ParseIPv6Header(pkt); err == nil {
			if src, err := wire.ILVFromAddr(h.Src); err == nil && src.NID == s.nid {
				k := fmt.Sprintf("nh%d", h.NextHeader)
				if len(pkt) > wire.IPv6HeaderLen+8 {
					k += fmt.Sprintf("/%d/%d", pkt[wire.IPv6HeaderLen], pkt[wire.IPv6HeaderLen+8])
				}
				s.kinds[k]++
			}
		}
		if s.isLU(pkt) {
			lu := append([]byte(nil), pkt...)
			// A tap on the CN sees the packet after its datapath retyped the checked nonce
			// option in place (wire.VerifiedNonceOptionType); on the wire it was the nonce.
			if lu[wire.IPv6HeaderLen+2] == wire.VerifiedNonceOptionType {
				lu[wire.IPv6HeaderLen+2] = wire.NonceOptionType
			}
			s.got = append(s.got, lu)
		}
		s.mu.Unlock()
	}
}

// isLU: IPv6 from the NID, a Destination Options header (the nonce), then an ICMPv6 LU
// advertisement.
func (s *luSniffer) isLU(pkt []byte) bool {
	h, err := wire.ParseIPv6Header(pkt)
	if err != nil || h.NextHeader != wire.ProtoDestOpts || len(pkt) < wire.IPv6HeaderLen+2 {
		return false
	}
	src, err := wire.ILVFromAddr(h.Src)
	if err != nil || src.NID != s.nid {
		return false
	}
	off := wire.IPv6HeaderLen + 8*(int(pkt[wire.IPv6HeaderLen+1])+1)
	return pkt[wire.IPv6HeaderLen] == wire.ProtoICMPv6 && len(pkt) > off+5 &&
		pkt[off] == wire.ICMPv6TypeLocatorUpdate && pkt[off+5] == byte(wire.OpAdvertisement)
}

// first is the first LU captured that lists loc.
func (s *luSniffer) first(loc wire.L64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pkt := range s.got {
		off := wire.IPv6HeaderLen + 8*(int(pkt[wire.IPv6HeaderLen+1])+1)
		h, _ := wire.ParseIPv6Header(pkt)
		u, err := wire.ParseLocatorUpdate(pkt[off:], h.Src, h.Dst, wire.LUParseOptions{})
		if err != nil {
			continue
		}
		for _, e := range u.Locators {
			if e.Locator == loc {
				return pkt, nil
			}
		}
	}
	return nil, fmt.Errorf("none of the %d LUs captured (of %d IPv6 packets, from the NID %v) lists %v", len(s.got), s.seen, s.kinds, loc)
}

func (s *luSniffer) close() {
	close(s.done)
	s.wg.Wait()
	unix.Close(s.fd)
}
