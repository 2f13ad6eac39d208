package attack

import (
	"context"
	"fmt"
	"time"

	"ilnp/internal/datapath"
	"ilnp/internal/wire"
	"ilnp/lab/netns"
)

// labSessionTable is the session table the lab's daemons run with (ilnpd's default).
const labSessionTable = 65536

// issue23Attacks are the embryo attacks of issue 23: embryo-squat and ping-flood-fill.
func (l *labRun) issue23Attacks(ctx context.Context, statSum func(*netns.NS, string, ...string) func() (uint64, error)) []attack {
	cn := l.t.CN
	ghost, err := wire.ParseL64(ghostPrefix[:len(ghostPrefix)-3])
	if err != nil {
		panic(err) // a constant of this file
	}
	var list []attack

	// Embryo squatting: Echo Replies (which draw no answer) from [atk : P] with made-up nonces,
	// P the NID of a newcomer that then pings the CN with its own nonce: accepted = its ping
	// not answered within 1 s (the squatter's embryo locked it out).
	squatted, _ := wire.RandomNID()
	list = append(list, attack{name: "embryo-squat", from: "atk (behind R1), made-up nonces for a newcomer's NID", attacker: l.atk,
		counters: []string{"CN dp_embryos_created", "dp_ingress_sessions_limited", "dp_ingress_bad_nonce"},
		count:    statSum(cn, l.cnSock, "dp_embryos_created", "dp_ingress_sessions_limited", "dp_ingress_bad_nonce"),
		packet: func(i int) ([]byte, error) {
			n, err := randomNonce()
			if err != nil {
				return nil, err
			}
			loc, err := wire.ParseL64(atkPrefix)
			if err != nil {
				return nil, err
			}
			return EchoReply(wire.ILV{Locator: loc, NID: squatted}, l.cnAddr, n, uint16(i>>16), uint16(i)), nil
		},
		measured: "the newcomer's ping with its own nonce not answered within 1 s",
		accepted: func() (int, error) {
			n, err := randomNonce()
			if err != nil {
				return 0, err
			}
			ok, err := l.newcomerAnswered(ctx, squatted, n, 1)
			if ok || err != nil {
				return 0, err
			}
			return 1, nil
		}})

	// Answered pings: two Echo Requests per made-up NID (the second used to make the session
	// look proven), from the ghost prefix (R1 drops the answers), at Rate for PingFlood.
	// accepted = flood sessions in the CN's ILCC beyond the unproven pool (a quarter of the
	// table), plus 1 if a newcomer's ping is then not answered within 1 s.
	packets := int(l.cfg.PingFlood.Seconds() * float64(l.cfg.Rate))
	flood := map[string]bool{}
	var nid wire.NID
	var nonce wire.Nonce
	list = append(list, attack{name: "ping-flood-fill", from: fmt.Sprintf("atk (behind R1), random NIDs, 2 pings each, %v", l.cfg.PingFlood),
		attacker: l.atk, packets: packets,
		counters: []string{"CN dp_embryos_created", "dp_ingress_sessions_limited (one per NID: its second ping is its session's)"},
		count:    statSum(cn, l.cnSock, "dp_embryos_created", "dp_ingress_sessions_limited"),
		expect:   func(sent int) uint64 { return uint64((sent + 1) / 2) },
		packet: func(i int) ([]byte, error) {
			if i%2 == 0 {
				var err error
				if nid, err = wire.RandomNID(); err != nil {
					return nil, err
				}
				if nonce, err = randomNonce(); err != nil {
					return nil, err
				}
				flood[nid.String()] = true
			}
			return EchoRequest(wire.ILV{Locator: ghost, NID: nid}, l.cnAddr, nonce, 0x77, uint16(i)), nil
		},
		measured: fmt.Sprintf("flood sessions in the CN's ILCC beyond the unproven pool (%d), +1 if a newcomer's ping is not answered within 1 s",
			labSessionTable/datapath.UnprovenPoolShare),
		accepted: func() (int, error) {
			rows, err := l.sessions(cn, l.cnSock)
			if err != nil {
				return 0, err
			}
			n := 0
			for _, r := range rows {
				if flood[r.PeerNID] {
					n++
				}
			}
			inILCC := n
			n = max(0, n-labSessionTable/datapath.UnprovenPoolShare)
			newcomer, err := wire.RandomNID()
			if err != nil {
				return 0, err
			}
			nn, err := randomNonce()
			if err != nil {
				return 0, err
			}
			answered := false
			for try := range 3 { // the flood's rate shares the new-session budget
				if answered, err = l.newcomerAnswered(ctx, newcomer, nn, uint16(try)); answered || err != nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				return 0, err
			}
			fmt.Fprintf(l.cfg.Log, "attack ping-flood-fill: %d of %d flood NIDs have a session in the CN's ILCC (unproven pool %d); newcomer answered %v\n",
				inILCC, len(flood), labSessionTable/datapath.UnprovenPoolShare, answered)
			if !answered {
				n++
			}
			return n, nil
		}})
	return list
}
