package natkeep

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/icmp"

	"ilnp/internal/datapath"
	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

const (
	nidA = wire.NID(0x021b21fffe6797a8)
	nidB = wire.NID(0x0250b6fffe0a0b0c)
	lA   = wire.L64(0x20010db8000a0001)
	lB   = wire.L64(0x20010db8000b0001)
	l32B = wire.L64(0x0000ee48cb007107) // 203.0.113.7:61000
)

func session(remoteActive wire.L64, created, lastTx uint64) datapath.Session {
	return datapath.Session{LocalNID: nidA, RemoteNID: nidB, LocalView: lA, RemoteView: lB,
		RemoteActive: remoteActive, CreatedNs: created, LastTxNs: lastTx}
}

func TestDue(t *testing.T) {
	const s = uint64(time.Second)
	iv := 25 * time.Second
	for _, tc := range []struct {
		name string
		sess datapath.Session
		now  uint64
		due  bool
	}{
		{"ipv4 peer, idle 30 s", session(l32B, 0, 10*s), 40 * s, true},
		{"ipv4 peer, idle exactly the interval", session(l32B, 0, 10*s), 35 * s, true},
		{"ipv4 peer, sent 5 s ago", session(l32B, 0, 35*s), 40 * s, false},
		{"ipv4 peer, never sent, created 30 s ago", session(l32B, 10*s, 0), 40 * s, true},
		{"ipv4 peer, never sent, just created", session(l32B, 39*s, 0), 40 * s, false},
		{"ipv4 peer, clock behind the session", session(l32B, 0, 50*s), 40 * s, false},
		{"ipv6 peer, idle", session(lB, 0, 0), 400 * s, false},
		{"view as active (0), idle", session(0, 0, 0), 400 * s, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Due([]datapath.Session{tc.sess}, tc.now, iv)
			if (len(got) == 1) != tc.due {
				t.Fatalf("Due = %v, want due %v", got, tc.due)
			}
			if tc.due && (got[0].Src != (wire.ILV{Locator: lA, NID: nidA}).Addr() || got[0].Dst != (wire.ILV{Locator: lB, NID: nidB}).Addr()) {
				t.Fatalf("target %+v", got[0])
			}
		})
	}
}

// The keeper sends an Echo Request from the session's view address to the peer's once the
// session has been idle for the interval, whatever became of other sessions' keepalives (here in a namespace with both addresses on a veth
// pair, without a datapath: what the datapath makes of it is tested in internal/datapath).
func TestKeeperSends(t *testing.T) {
	ns := nstest.New(t, "enK")
	ns.Run("ip", "link", "add", "k0", "type", "veth", "peer", "name", "k1")
	ns.Run("ip", "link", "set", "k0", "up")
	ns.Run("ip", "link", "set", "k1", "up")
	src, dst := (wire.ILV{Locator: lA, NID: nidA}).Addr(), (wire.ILV{Locator: lB, NID: nidB}).Addr()
	ns.Run("ip", "addr", "add", src.String()+"/64", "dev", "k0", "nodad")
	ns.Run("ip", "addr", "add", dst.String()+"/64", "dev", "k1", "nodad")
	var send, recv *icmp.PacketConn
	if err := ns.Do(func() error {
		var err error
		if send, err = icmp.ListenPacket("ip6:ipv6-icmp", "::"); err != nil {
			return err
		}
		recv, err = icmp.ListenPacket("ip6:ipv6-icmp", dst.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	defer recv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var now uint64 = uint64(time.Hour)
	// A session whose view address is not (or no longer) on this host comes first: its
	// keepalive cannot be sent, and that must not cost the next session its own.
	gone := session(l32B, 0, now-uint64(time.Second))
	gone.LocalView = wire.L64(0x20010db8000c0001)
	var failed atomic.Int32
	k := &Keeper{Interval: 100 * time.Millisecond, Now: func() uint64 { return now },
		Sessions: func() ([]datapath.Session, error) {
			return []datapath.Session{gone, session(l32B, 0, now-uint64(time.Second))}, nil
		},
		Failed: func(error) { failed.Add(1) }}
	errc := make(chan error, 1)
	go func() { errc <- k.Run(ctx, send) }()
	_ = recv.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 1500)
	for {
		n, from, err := recv.ReadFrom(buf)
		if err != nil {
			t.Fatalf("no keepalive: %v", err)
		}
		m, err := icmp.ParseMessage(58, buf[:n])
		if err != nil || m.Type.Protocol() != 58 {
			continue
		}
		if _, ok := m.Body.(*icmp.Echo); !ok {
			continue
		}
		if a, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP); a != src {
			t.Fatalf("keepalive from %v, want the session view %v", a, src)
		}
		break
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if failed.Load() == 0 {
		t.Fatal("the keepalive from an address not on the host was not reported as failed")
	}
}
