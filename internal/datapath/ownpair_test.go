package datapath

import (
	"errors"
	"testing"
	"unsafe"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// pathMapKeys lists the paths map alone (the pairs not counted in a session's entry).
func pathMapKeys(t *testing.T, d *Datapath) []PathKey {
	t.Helper()
	var out []PathKey
	must(t, readAll(d.objs.Paths, func(k *ilnpBPFIlnpPathKey, _ *ilnpBPFIlnpPathStats) {
		out = append(out, pathKeyFromBPF(*k))
	}))
	return out
}

// A packet on the session's main pair counts in the session's entry and makes no paths map
// entry; one on another pair does; Paths lists both with what went over the wire. When the
// main pair changes (a move), the next packet on it moves the session's own counters: the
// old pair's go to the paths map, the new pair's come out of it, and no count is lost.
func TestOwnPairCounters(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	main := PathKey{LocalNID: nidA, RemoteNID: nidB, Local: lA2, Remote: lB2}
	other := PathKey{LocalNID: nidA, RemoteNID: nidB, Local: lA1, Remote: lB1}
	out := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoUDP, transport(t, wire.ProtoUDP, h.viewSrc(), h.viewDst(), payload)))
	var sent uint64
	for range 3 {
		ret, wireOut := d.egress(t, out)
		if ret != verdictRedirect {
			t.Fatalf("egress verdict %d", ret)
		}
		if p, _ := parseFrame(t, wireOut); p.IPv6.Src != addr(lA2, nidA) || p.IPv6.Dst != addr(lB2, nidB) {
			t.Fatalf("left %v -> %v, want the main pair", p.IPv6.Src, p.IPv6.Dst)
		}
		sent += uint64(len(wireOut))
	}
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	ret, got := d.ingress(t, frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA},
		h.peerNonce, wire.ProtoUDP, transport(t, wire.ProtoUDP, zeroLocator(from), zeroLocator(to), payload))))
	if ret != verdictNext {
		t.Fatalf("ingress verdict %d", ret)
	}
	received := uint64(len(got))
	if keys := pathMapKeys(t, d); len(keys) != 0 {
		t.Fatalf("main pair's packets made paths map entries %+v", keys)
	}
	p := pathOf(t, d, main)
	if p.TxPackets != 3 || p.TxBytes != sent || p.RxPackets != 1 || p.RxBytes != received ||
		p.Unanswered != 0 || p.FirstUnansweredTxNs != 0 || p.LastTxNs == 0 || p.LastRxNs == 0 {
		t.Fatalf("main pair %+v, want 3 sent (%d bytes), 1 received (%d bytes), answered", p, sent, received)
	}
	if now := MonotonicCoarseNow(); p.LastRxNs > now || now-p.LastRxNs > 5e9 {
		t.Fatalf("main pair's last receipt %d ns, now %d", p.LastRxNs, now)
	}

	// The peer's other locator to our other one: the paths map.
	from, to = addr(lB1, nidB), addr(lA1, nidA)
	in := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB1, NID: nidB}, wire.ILV{Locator: lA1, NID: nidA},
		h.peerNonce, wire.ProtoUDP, transport(t, wire.ProtoUDP, zeroLocator(from), zeroLocator(to), payload)))
	ret, got = d.ingress(t, in)
	if ret != verdictNext {
		t.Fatalf("ingress verdict %d", ret)
	}
	if keys := pathMapKeys(t, d); len(keys) != 1 || keys[0] != other {
		t.Fatalf("paths map %+v, want only %+v", keys, other)
	}
	if q := pathOf(t, d, other); q.RxPackets != 1 || q.RxBytes != uint64(len(got)) || q.TxPackets != 0 {
		t.Fatalf("second pair %+v", q)
	}
	if q := pathOf(t, d, main); q.TxPackets != 3 || q.RxPackets != 1 {
		t.Fatalf("main pair after the second pair's packet: %+v", q)
	}

	// A move: (lA1, lB1) becomes the main pair; the next packet sent moves the counters.
	must(t, d.SetActiveLocator(lA1))
	must(t, d.PutLocalLocator(LocalLocator{Locator: lA1, State: LocatorActive, Ifindex: 1}))
	if _, err := d.SetRemoteLocators(nidB, []RemoteLocator{{Locator: lB1, State: LocatorActive}, {Locator: lB2, State: LocatorValid}}, lB1); err != nil {
		t.Fatal(err)
	}
	ret, wireOut := d.egress(t, out)
	if p, _ := parseFrame(t, wireOut); ret == verdictDrop || p.IPv6.Src != addr(lA1, nidA) || p.IPv6.Dst != addr(lB1, nidB) {
		t.Fatalf("after the move: verdict %d, left %v -> %v", ret, p.IPv6.Src, p.IPv6.Dst)
	}
	if keys := pathMapKeys(t, d); len(keys) != 1 || keys[0] != main {
		t.Fatalf("paths map after the move %+v, want only the old pair %+v", keys, main)
	}
	if q := pathOf(t, d, main); q.TxPackets != 3 || q.TxBytes != sent || q.RxPackets != 1 || q.RxBytes != received || q.LastRxNs == 0 {
		t.Fatalf("old pair after the move %+v", q)
	}
	q := pathOf(t, d, other)
	if q.TxPackets != 1 || q.TxBytes != uint64(len(wireOut)) || q.RxPackets != 1 || q.Unanswered != 1 || q.FirstUnansweredTxNs == 0 {
		t.Fatalf("new main pair after the move %+v", q)
	}
	ps, err := d.Paths()
	must(t, err)
	if len(ps) != 2 {
		t.Fatalf("paths %+v, want 2", ps)
	}

	// DeletePath forgets the session's own pair as it does one in the map.
	must(t, d.DeletePath(other))
	must(t, d.DeletePath(main))
	if ps, err := d.Paths(); err != nil || len(ps) != 0 {
		t.Fatalf("paths after deleting both: %+v %v", ps, err)
	}
	if err := d.DeletePath(main); err == nil {
		t.Fatal("deleting a pair twice: no error")
	}
}

// The session entry grew by its own pair: the layout a pinned map records changes with it,
// so a daemon of this version refuses maps pinned by the previous one (TestLayoutMismatch
// covers the refusal itself).
func TestLayoutSeesOwnPair(t *testing.T) {
	spec, err := loadIlnpBPF()
	must(t, err)
	now := layoutOf(spec)
	for _, name := range []string{"sessions", "embryos"} {
		spec.Maps[name].ValueSize -= uint32(unsafe.Sizeof(ilnpBPFIlnpPair{}))
	}
	if before := layoutOf(spec); before == now {
		t.Fatalf("layout %s the same without the session's own pair", now)
	}
	requireLayoutRefused(t, layoutOf(spec), "the layout before the session's own pair")
}

// requireLayoutRefused: maps pinned by an ilnpd that recorded the layout old are refused by
// Load (ErrLayoutMismatch; the user runs ilnpd -flush then).
func requireLayoutRefused(t *testing.T, old, what string) {
	t.Helper()
	nstest.RequireRoot(t)
	dir := mountBPFFS(t)
	d, err := Load(Options{PinDir: dir, KeepPinned: true})
	must(t, err)
	must(t, d.Close())
	must(t, writeLayout(dir, old)) // what the previous ilnpd recorded
	if _, err := Load(Options{PinDir: dir, KeepPinned: true}); !errors.Is(err, ErrLayoutMismatch) {
		t.Fatalf("maps pinned with %s: %v, want ErrLayoutMismatch", what, err)
	}
	must(t, FlushPinned(dir))
}

// A session's own pair keeps its times in 2^20 ns units modulo 2^32: read back, a time comes
// out as the one nearest the reader's clock, also when the packet stamped it after the reader
// took its clock (a table read while traffic flows), and across the counter's wrap.
func TestPairNs(t *testing.T) {
	const unit = 1 << pairTimeShift
	for _, c := range []struct {
		name string
		at   uint64 // the packet's time
		now  uint64 // the reader's clock
	}{
		{"a second before", 1_000_000 * unit, 1_000_000*unit + 1e9},
		{"a tick after the reader's clock", 1_000_000*unit + 2*unit, 1_000_000 * unit},
		{"across the wrap", 1<<(32+pairTimeShift) - 5*unit, 1<<(32+pairTimeShift) + 3*unit},
		{"after, across the wrap", 1<<(32+pairTimeShift) + unit, 1<<(32+pairTimeShift) - unit},
		{"a day before", 40 * 86400e9, 41 * 86400e9},
	} {
		stamp := uint32(c.at >> pairTimeShift)
		if got, want := pairNs(stamp, c.now), c.at&^(unit-1); got != want {
			t.Errorf("%s: pairNs(%d, %d) = %d, want %d", c.name, stamp, c.now, got, want)
		}
	}
	if pairNs(0, 1e12) != 0 {
		t.Error("0 (never) read as a time")
	}
}
