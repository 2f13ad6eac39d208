package attack

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"ilnp/internal/wire"
	"ilnp/lab/netns"
)

// attack is one row: who sends what, and how the victim says what it did with it.
type attack struct {
	name, from string
	attacker   *netns.NS
	// count reads the victim's drop counters (their sum must reach the packets sent).
	counters []string
	count    func() (uint64, error)
	packet   func(i int) ([]byte, error)
	// accepted measures on the victim what got through since prepare.
	measured string
	prepare  func() error
	accepted func() (int, error)
	// finish restores the lab for the attacks that follow, after the measurement.
	finish  func() error
	rate    int
	packets int                   // >0: this many, not a share of Count
	expect  func(sent int) uint64 // what the counters must reach (nil: sent)
}

func randomNonce() (wire.Nonce, error) { return wire.RandomNonce(4) }

func (l *labRun) attacks(ctx context.Context) ([]Result, error) {
	var list []attack
	cn, mn := l.t.CN, l.t.MN
	statSum := func(ns *netns.NS, sock string, names ...string) func() (uint64, error) {
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
	// LUs claiming the MN moved to badLocator: accepted = LUs the CN's ILCC applied (it
	// acknowledges each), or 1 if its session with the MN changed at all.
	var luBefore map[string]uint64
	var sessBefore sessionRow
	luPrepare := func() (err error) {
		if luBefore, err = l.stats(cn, l.cnSock); err != nil {
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
	}
	luAccepted := func() (int, error) {
		s, err := l.stats(cn, l.cnSock)
		if err != nil {
			return 0, err
		}
		n := int(s["lu_ack_sent"] - luBefore["lu_ack_sent"])
		rows, err := l.sessions(cn, l.cnSock)
		if err != nil {
			return 0, err
		}
		now, ok := sessionOf(rows, l.mnAddr.NID.String())
		if n == 0 && (!ok || now.ActiveRemote != sessBefore.ActiveRemote || now.RemoteLocators != sessBefore.RemoteLocators) {
			n = 1
		}
		return n, nil
	}
	forgedLU := func(withNonce bool) func(int) ([]byte, error) {
		src := l.mnAddr
		return func(int) ([]byte, error) {
			var n wire.Nonce
			if withNonce {
				var err error
				if n, err = randomNonce(); err != nil {
					return nil, err
				}
			}
			return LocatorUpdate(src, l.cnAddr, wire.OpAdvertisement, []wire.L64{badLocator}, n)
		}
	}
	const luMeasure = "LUs the CN's ILCC applied (lu_ack_sent) or a change of its session"
	list = append(list,
		attack{name: "lu-no-nonce-offlink", from: "atk (behind R1)", attacker: l.atk,
			counters: []string{"CN dp_ingress_missing_nonce"}, count: statSum(cn, l.cnSock, "dp_ingress_missing_nonce"),
			packet: forgedLU(false), measured: luMeasure, prepare: luPrepare, accepted: luAccepted},
		attack{name: "lu-wrong-nonce-offlink", from: "atk (behind R1)", attacker: l.atk,
			counters: []string{"CN dp_ingress_bad_nonce"}, count: statSum(cn, l.cnSock, "dp_ingress_bad_nonce"),
			packet: forgedLU(true), measured: luMeasure, prepare: luPrepare, accepted: luAccepted},
		attack{name: "lu-no-nonce-onlink", from: "atkc (CN's non-ILNP veth)", attacker: l.atkc,
			counters: []string{"CN lu_foreign_interface"}, count: statSum(cn, l.cnSock, "lu_foreign_interface"),
			packet: forgedLU(false), measured: luMeasure, prepare: luPrepare, accepted: luAccepted},
		attack{name: "lu-wrong-nonce-onlink", from: "atkc (CN's non-ILNP veth)", attacker: l.atkc,
			counters: []string{"CN kernel cn-atk Ip6InHdrErrors (unknown option 0x8B, discard)"},
			count:    func() (uint64, error) { return kernelCounter(cn, "cn-atk", "", "Ip6InHdrErrors") },
			packet:   forgedLU(true), measured: luMeasure, prepare: luPrepare, accepted: luAccepted},
	)

	// Forged LU-ACKs to the MN: accepted = ACKs that reached its LU engine.
	var mnBefore map[string]uint64
	ackAccepted := func(s map[string]uint64) int {
		n := 0
		for k, v := range s {
			if strings.HasPrefix(k, "lu_ack_") && k != "lu_ack_sent" && k != "lu_ack_rejected" {
				n += int(v - mnBefore[k])
			}
		}
		return n
	}
	list = append(list, attack{name: "lu-ack-forged", from: "atk (behind R1)", attacker: l.atk,
		counters: []string{"MN dp_ingress_bad_nonce"}, count: statSum(mn, l.mnSock, "dp_ingress_bad_nonce"),
		packet: func(int) ([]byte, error) {
			n, err := randomNonce()
			if err != nil {
				return nil, err
			}
			return LocatorUpdate(l.cnAddr, l.mnAddr, wire.OpAcknowledgement, []wire.L64{l.mnAddr.Locator}, n)
		},
		measured: "LU-ACKs that reached the MN's LU engine (lu_ack_<outcome>)",
		prepare:  func() (err error) { mnBefore, err = l.stats(mn, l.mnSock); return err },
		accepted: func() (int, error) {
			s, err := l.stats(mn, l.mnSock)
			return ackAccepted(s), err
		}})

	// LUs from the ghost's own locator while the CN's session waits for its first nonce.
	var ghostLU uint64
	list = append(list, attack{name: "lu-during-nonce-learning", from: "atk (behind R1), spoofing the ghost's locator", attacker: l.atk,
		counters: []string{"CN dp_ingress_learn_refused"}, count: statSum(cn, l.cnSock, "dp_ingress_learn_refused"),
		packet: func(int) ([]byte, error) {
			n, err := randomNonce()
			if err != nil {
				return nil, err
			}
			return LocatorUpdate(l.ghost, l.cnAddr, wire.OpAdvertisement, []wire.L64{badLocator}, n)
		},
		measured: "the CN's session with the ghost learned a nonce, or its ILCC applied an LU",
		prepare: func() error {
			if err := l.openGhostSession(); err != nil {
				return err
			}
			s, err := l.stats(cn, l.cnSock)
			ghostLU = s["lu_ack_sent"]
			return err
		},
		accepted: func() (int, error) {
			s, err := l.stats(cn, l.cnSock)
			if err != nil {
				return 0, err
			}
			n := int(s["lu_ack_sent"] - ghostLU)
			rows, err := l.sessions(cn, l.cnSock)
			if err != nil {
				return 0, err
			}
			if g, ok := sessionOf(rows, l.ghost.NID.String()); ok && g.RemoteNonce != "" {
				n++
			}
			return n, nil
		}})

	// Data with random nonces to a UDP socket on the CN: accepted = datagrams delivered to it.
	var sinkBefore int64
	list = append(list, attack{name: "data-random-nonce", from: "atk (behind R1), spoofing the MN", attacker: l.atk,
		counters: []string{"CN dp_ingress_bad_nonce"}, count: statSum(cn, l.cnSock, "dp_ingress_bad_nonce"),
		packet: func(i int) ([]byte, error) {
			n, err := randomNonce()
			if err != nil {
				return nil, err
			}
			return UDP(l.mnAddr, l.cnAddr, n, 40000, sinkPort, []byte(fmt.Sprintf("forged %d", i))), nil
		},
		measured: "datagrams the CN's UDP socket received",
		prepare:  func() error { sinkBefore = l.sink.got.Load(); return nil },
		accepted: func() (int, error) { return int(l.sink.got.Load() - sinkBefore), nil }})

	// Resets of the live connection with its exact next sequence number and a random nonce.
	var seq uint32
	var resets0 uint64
	list = append(list, attack{name: "tcp-rst-random-nonce", from: "atk (behind R1), spoofing the MN, exact sequence number", attacker: l.atk,
		counters: []string{"CN dp_ingress_bad_nonce"}, count: statSum(cn, l.cnSock, "dp_ingress_bad_nonce"),
		packet: func(int) ([]byte, error) {
			n, err := randomNonce()
			if err != nil {
				return nil, err
			}
			return RST(l.mnAddr, l.cnAddr, n, flowPort, l.flow.ClientPort, seq), nil
		},
		measured: "resets the CN's TCP took (Tcp EstabResets) ",
		prepare: func() (err error) {
			if seq, err = sniffAck(l.t.R1, "r1-cn", l.cnAddr.Addr(), l.mnAddr.Addr(), l.flow.ClientPort, flowPort); err != nil {
				return err
			}
			resets0, err = kernelCounter(cn, "", "Tcp", "EstabResets")
			return err
		},
		accepted: func() (int, error) {
			r, err := kernelCounter(cn, "", "Tcp", "EstabResets")
			return int(r - resets0), err
		}})

	// The same datagrams and resets without any nonce: plain IPv6 between the session's
	// addresses, which the peer never sends (nonce on every packet, README Security).
	var sinkBefore2 int64
	list = append(list, attack{name: "data-no-nonce", from: "atk (behind R1), spoofing the MN, no nonce", attacker: l.atk,
		counters: []string{"CN dp_ingress_missing_nonce"}, count: statSum(cn, l.cnSock, "dp_ingress_missing_nonce"),
		packet: func(i int) ([]byte, error) {
			return UDP(l.mnAddr, l.cnAddr, wire.Nonce{}, 40000, sinkPort, []byte(fmt.Sprintf("forged %d", i))), nil
		},
		measured: "datagrams the CN's UDP socket received",
		prepare:  func() error { sinkBefore2 = l.sink.got.Load(); return nil },
		accepted: func() (int, error) { return int(l.sink.got.Load() - sinkBefore2), nil }})
	var seq2 uint32
	var resets2 uint64
	list = append(list, attack{name: "tcp-rst-no-nonce", from: "atk (behind R1), spoofing the MN, exact sequence number, no nonce", attacker: l.atk,
		counters: []string{"CN dp_ingress_missing_nonce"}, count: statSum(cn, l.cnSock, "dp_ingress_missing_nonce"),
		packet: func(int) ([]byte, error) {
			return RST(l.mnAddr, l.cnAddr, wire.Nonce{}, flowPort, l.flow.ClientPort, seq2), nil
		},
		measured: "resets the CN's TCP took (Tcp EstabResets) ",
		prepare: func() (err error) {
			if seq2, err = sniffAck(l.t.R1, "r1-cn", l.cnAddr.Addr(), l.mnAddr.Addr(), l.flow.ClientPort, flowPort); err != nil {
				return err
			}
			resets2, err = kernelCounter(cn, "", "Tcp", "EstabResets")
			return err
		},
		accepted: func() (int, error) {
			r, err := kernelCounter(cn, "", "Tcp", "EstabResets")
			return int(r - resets2), err
		}})

	// A session-table flood: made-up NIDs, random nonces, Echo Replies (which nobody answers),
	// at twice the rate of the other attacks: accepted = sessions it got into the CN's ILCC.
	list = append(list, attack{name: "session-table-flood", from: "atk (behind R1), random NIDs", attacker: l.atk,
		counters: []string{"CN dp_embryos_created", "dp_ingress_sessions_limited"},
		count:    statSum(cn, l.cnSock, "dp_embryos_created", "dp_ingress_sessions_limited"),
		packet: func(i int) ([]byte, error) {
			nid, err := wire.RandomNID()
			if err != nil {
				return nil, err
			}
			n, err := randomNonce()
			if err != nil {
				return nil, err
			}
			loc, err := wire.ParseL64(atkPrefix)
			if err != nil {
				return nil, err
			}
			return EchoReply(wire.ILV{Locator: loc, NID: nid}, l.cnAddr, n, uint16(i>>16), uint16(i)), nil
		},
		measured: "sessions in the CN's ILCC with anyone but the MN and the ghost",
		rate:     2 * l.cfg.Rate,
		accepted: func() (int, error) {
			rows, err := l.sessions(cn, l.cnSock)
			n := 0
			for _, r := range rows {
				if r.PeerNID != l.mnAddr.NID.String() && r.PeerNID != l.ghost.NID.String() {
					n++
				}
			}
			return n, err
		}})

	list = append(list, l.luUnknownSession(), l.luReplay())
	// The ping flood leaves the most behind (unproven sessions): it runs last.
	list = append(list, l.issue23Attacks(ctx, statSum)...)
	shared, last := 0, 0
	for i, a := range list {
		if a.packets == 0 {
			shared, last = shared+1, i
		}
	}
	per := l.cfg.Count / shared
	var results []Result
	for i, a := range list {
		count := per
		if a.packets > 0 {
			count = a.packets
		} else if i == last {
			count = l.cfg.Count - per*(shared-1)
		}
		r, err := l.run(ctx, a, count)
		if err != nil {
			return nil, fmt.Errorf("attack %s: %w", a.name, err)
		}
		fmt.Fprintf(l.cfg.Log, "attack %-26s sent %5d accepted %d counted %d flow survived %v\n", a.name, *r.Sent, *r.Accepted, r.Counted, *r.FlowSurvived)
		results = append(results, r)
	}
	return results, nil
}

// run does one attack: the victim's state before, the packets, the state after.
func (l *labRun) run(ctx context.Context, a attack, count int) (Result, error) {
	if a.prepare != nil {
		if err := a.prepare(); err != nil {
			return Result{}, fmt.Errorf("prepare: %w", err)
		}
	}
	c0, err := a.count()
	if err != nil {
		return Result{}, err
	}
	bytes0 := l.flow.received.Load()
	snd, err := newRawSender(a.attacker)
	if err != nil {
		return Result{}, err
	}
	defer snd.close()
	rate := a.rate
	if rate == 0 {
		rate = l.cfg.Rate
	}
	sent, err := snd.send(ctx, count, rate, a.packet)
	if err != nil {
		return Result{}, err
	}
	// The victims' daemons read their counters a moment later; give them up to 3 s.
	var counted uint64
	expect := uint64(sent)
	if a.expect != nil {
		expect = a.expect(sent)
	}
	for deadline := time.Now().Add(3 * time.Second); ; {
		c, err := a.count()
		if err != nil {
			return Result{}, err
		}
		counted = c - c0
		if counted >= expect || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a (wrongly) accepted packet takes effect
	acc, err := a.accepted()
	if err != nil {
		return Result{}, err
	}
	survived := l.flow.Err() == nil && l.flow.received.Load() > bytes0
	if a.finish != nil {
		if err := a.finish(); err != nil {
			return Result{}, fmt.Errorf("finish: %w", err)
		}
	}
	return Result{Attack: a.name, Sent: &sent, Accepted: &acc, FlowSurvived: &survived,
		From: a.from, Measured: a.measured, Counters: a.counters, Counted: counted, Expected: expect}, nil
}

// openGhostSession makes the CN open a session to the ghost (one datagram it never answers),
// so that the CN's datapath waits for the ghost's first nonce.
func (l *labRun) openGhostSession() error {
	if err := l.t.CN.Do(func() error {
		c, err := net.Dial("udp6", netip.AddrPortFrom(l.ghost.Addr(), 9).String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("hello ghost"))
		return err
	}); err != nil {
		return fmt.Errorf("datagram to the ghost: %w", err)
	}
	for deadline := time.Now().Add(3 * time.Second); ; {
		rows, err := l.sessions(l.t.CN, l.cnSock)
		if err != nil {
			return err
		}
		if g, ok := sessionOf(rows, l.ghost.NID.String()); ok {
			if g.RemoteNonce != "" {
				return fmt.Errorf("the CN's session with the ghost has a nonce before any attack: %+v", g)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the CN opened no session to the ghost %s: %+v", l.ghost.Addr(), rows)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Redirection is the insider attack that locator verification (README, Security;
// internal/locverify) stops: a peer that holds the session's real nonce announces the attacker
// network's prefix as its only locator. The LU is applied, but the CN sends towards the
// never-verified locator at most 3x what it received from there. It runs last, as it may take
// the flow away from the MN.
const Redirection = "redirection-valid-nonce"

// redirection sends that one LU (from the MN's own locator, with its nonce) and counts on R1
// the bytes forwarded towards the announced prefix and received from it over the next 2 s.
func (l *labRun) redirection(ctx context.Context) (Result, error) {
	cn := l.t.CN
	nonce, err := l.mnNonce()
	if err != nil {
		return Result{}, err
	}
	victim, err := wire.ParseL64(atkPrefix)
	if err != nil {
		return Result{}, err
	}
	const table = "ilnpattack"
	if _, err := l.t.R1.Run("nft", "add table ip6 "+table+"; add chain ip6 "+table+
		" relay { type filter hook forward priority 0; }; add rule ip6 "+table+" relay ip6 daddr "+victim.Prefix().String()+
		" counter; add rule ip6 "+table+" relay ip6 saddr "+victim.Prefix().String()+" counter"); err != nil {
		return Result{}, fmt.Errorf("byte counters on R1: %w", err)
	}
	defer func() { _, _ = l.t.R1.Run("nft", "delete table ip6 "+table) }()
	stats0, err := l.stats(cn, l.cnSock)
	if err != nil {
		return Result{}, err
	}
	snd, err := newRawSender(l.atk)
	if err != nil {
		return Result{}, err
	}
	defer snd.close()
	sent, err := snd.send(ctx, 1, 100, func(int) ([]byte, error) {
		return LocatorUpdate(l.mnAddr, l.cnAddr, wire.OpAdvertisement, []wire.L64{victim}, nonce)
	})
	if err != nil {
		return Result{}, err
	}
	time.Sleep(time.Second)
	mid := l.flow.received.Load()
	time.Sleep(time.Second)
	survived := l.flow.Err() == nil && l.flow.received.Load() > mid
	counts, stats, err := l.redirectionCounts("ip6", table)
	if err != nil {
		return Result{}, err
	}
	// Applied, not acknowledged: the LU-ACK to the unverified locator is itself held to its
	// credit (none) and may not leave.
	acc := int(stats["lu_applied"] - stats0["lu_applied"])
	return Result{Attack: Redirection, Sent: &sent, Accepted: &acc, FlowSurvived: &survived,
		UnverifiedBytesSent: &counts[0], UnverifiedBytesReceived: &counts[1],
		From: "atk (behind R1), spoofing the MN with its real nonce (an insider)", Measured: "LUs the CN's ILCC applied (lu_applied)",
		Counters: []string{"R1 bytes forwarded to / from the announced prefix (not a drop counter)"}}, nil
}

// redirectionCounts reads what a redirection attack cost: R1's two byte counters (to and from
// the announced locator) in the nft table of the given family, and the CN's daemon counters.
func (l *labRun) redirectionCounts(family, table string) ([]int64, map[string]uint64, error) {
	out, err := l.t.R1.Run("nft", "list table "+family+" "+table)
	if err != nil {
		return nil, nil, err
	}
	counts := nftBytes(out)
	if len(counts) != 2 {
		return nil, nil, fmt.Errorf("R1's counters: %q", out)
	}
	stats, err := l.stats(l.t.CN, l.cnSock)
	return counts, stats, err
}

// nftBytes returns the byte figures of the "counter packets N bytes M" in nft's listing, in order.
func nftBytes(listing string) []int64 {
	var out []int64
	f := strings.Fields(listing)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "bytes" {
			var v int64
			if _, err := fmt.Sscan(f[i+1], &v); err == nil {
				out = append(out, v)
			}
		}
	}
	return out
}

func nonceFromHex(s string) (wire.Nonce, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return wire.Nonce{}, fmt.Errorf("nonce %q: %w", s, err)
	}
	return wire.NonceFromBytes(b)
}
