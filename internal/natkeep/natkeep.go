// Package natkeep holds NAT bindings open for ILNPv6 sessions that run encapsulated over IPv4
// (bpf/lib/encap.h): a NAT forgets a UDP binding that carries no traffic for a while (RFC 4787
// REQ-5 asks for at least 2 minutes, but many NATs use 30 s), after which the correspondent
// can no longer reach a node behind it. When such a session has sent nothing for Interval, an
// ICMPv6 Echo Request goes from the session's view address to the peer's: the datapath gives
// it the nonce and the UDP/IPv4 wrapping like any packet of the session, and the peer's Echo
// Reply refreshes the binding in the other direction too.
package natkeep

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"

	"ilnp/internal/datapath"
	"ilnp/internal/encap"
	"ilnp/internal/wire"
)

// DefaultInterval is the keepalive interval when none is configured: below the 30 s UDP
// timeout of the most forgetful NATs, as WireGuard's recommended 25 s persistent keepalive.
const DefaultInterval = 25 * time.Second

// Target is one keepalive to send: between the session's view addresses.
type Target struct {
	Src, Dst netip.Addr
}

// Due lists the sessions that need a keepalive at nowNs (CLOCK_MONOTONIC): those whose active
// remote locator is an IPv4 endpoint and that have sent nothing for interval.
func Due(sessions []datapath.Session, nowNs uint64, interval time.Duration) []Target {
	var out []Target
	for _, s := range sessions {
		if !encap.IsL32(s.RemoteActive) {
			continue
		}
		last := max(s.LastTxNs, s.CreatedNs)
		if nowNs <= last || time.Duration(nowNs-last) < interval {
			continue
		}
		out = append(out, Target{
			Src: wire.ILV{Locator: s.LocalView, NID: s.LocalNID}.Addr(),
			Dst: wire.ILV{Locator: s.RemoteView, NID: s.RemoteNID}.Addr(),
		})
	}
	return out
}

// Keeper sends the keepalives.
type Keeper struct {
	Interval time.Duration // 0: DefaultInterval
	// Sessions lists the datapath's sessions (datapath.Datapath.Sessions).
	Sessions func() ([]datapath.Session, error)
	// Now is CLOCK_MONOTONIC in ns (datapath.MonotonicNs when nil).
	Now func() uint64
	// Failed hears of a keepalive that could not be sent, or a session list that could not
	// be read (nil: ignored). Neither stops the keeper: one session's failure must not end
	// every other session's keepalives.
	Failed func(error)
}

// Run checks the sessions every Interval/5 until ctx ends, sending a keepalive to each one due;
// a failure goes to Failed and the next session, or the next tick, carries on. conn is a raw
// ICMPv6 socket (icmp.ListenPacket("ip6:ipv6-icmp", "::")) that Run uses and does not close.
func (k *Keeper) Run(ctx context.Context, conn *icmp.PacketConn) error {
	interval := k.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	now := k.Now
	if now == nil {
		now = datapath.MonotonicNs
	}
	tick := time.NewTicker(interval / 5)
	defer tick.Stop()
	var seq uint16
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		sessions, err := k.Sessions()
		if err != nil {
			k.fail(fmt.Errorf("natkeep: sessions: %w", err))
			continue
		}
		for _, tg := range Due(sessions, now(), interval) {
			seq++
			if err := Send(conn, tg, seq); err != nil {
				k.fail(err)
			}
		}
	}
}

func (k *Keeper) fail(err error) {
	if k.Failed != nil {
		k.Failed(err)
	}
}

// Send sends one keepalive Echo Request from tg.Src to tg.Dst.
func Send(conn *icmp.PacketConn, tg Target, seq uint16) error {
	body := make([]byte, 4)
	binary.BigEndian.PutUint32(body, 0x4b454550) // "KEEP"
	msg, err := (&icmp.Message{Type: ipv6.ICMPTypeEchoRequest, Body: &icmp.Echo{ID: 0x494c, Seq: int(seq), Data: body}}).Marshal(nil)
	if err != nil {
		return fmt.Errorf("natkeep: echo request: %w", err)
	}
	cm := &ipv6.ControlMessage{Src: tg.Src.AsSlice()}
	if _, err := conn.IPv6PacketConn().WriteTo(msg, cm, &net.IPAddr{IP: tg.Dst.AsSlice()}); err != nil {
		return fmt.Errorf("natkeep: keepalive %v -> %v: %w", tg.Src, tg.Dst, err)
	}
	return nil
}
