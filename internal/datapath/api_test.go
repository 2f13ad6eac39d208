package datapath

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

func TestLoadRejectsBadOptions(t *testing.T) {
	nstest.RequireRoot(t)
	if _, err := Load(Options{NonceSize: 8}); err == nil {
		t.Fatal("nonce size 8 accepted")
	}
}

func TestSessionAPI(t *testing.T) {
	d := newDatapath(t, Options{NonceSize: 12})
	if err := d.PutSession(Session{LocalNID: nidA}); err == nil {
		t.Fatal("session without remote NID and views accepted")
	}
	tooMany := make([]RemoteLocator, MaxRemoteLocators+1)
	for i := range tooMany {
		tooMany[i] = RemoteLocator{Locator: wire.L64(i + 1), State: LocatorValid}
	}
	if err := d.PutSession(Session{LocalNID: nidA, RemoteNID: nidB, LocalView: lA1, RemoteView: lB1, RemoteLocators: tooMany}); err == nil {
		t.Fatal("9 remote locators accepted")
	}
	if _, err := d.GetSession(nidA, nidB); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing session: %v", err)
	}
	first := mustNonce(t, 1, 1, 1, 1)
	s := Session{LocalNID: nidA, RemoteNID: nidB, LocalView: lA1, RemoteView: lB1,
		RemoteLocators: []RemoteLocator{{Locator: lB1, State: LocatorActive, Preference: 5, Lifetime: 60}},
		RemoteNonce:    first, Flags: SessionSoft}
	must(t, d.PutSession(s))
	got, err := d.GetSession(nidA, nidB)
	must(t, err)
	if now := MonotonicNs(); got.CreatedNs == 0 || got.CreatedNs > now {
		t.Fatalf("clock: now %d, created %d", now, got.CreatedNs)
	}
	if got.LocalNonce.Len() != 12 || got.RemoteNonce != first || got.Flags != SessionSoft || len(got.RemoteLocators) != 1 ||
		got.RemoteLocators[0] != s.RemoteLocators[0] || got.LocalAddr() != addr(lA1, nidA) || got.RemoteAddr() != addr(lB1, nidB) {
		t.Fatalf("round trip: %+v", got)
	}
	second := mustNonce(t, 2, 2, 2, 2)
	got.RemoteNonce = second
	must(t, d.PutSession(got))
	// A caller that does not know the remote nonce yet (zero) leaves the learned one alone:
	// the daemon records a session while the packet path may already have learned it.
	stale := got
	stale.RemoteNonce = wire.Nonce{}
	must(t, d.PutSession(stale))
	if again, err := d.GetSession(nidA, nidB); err != nil || again.RemoteNonce != second {
		t.Fatalf("a zero remote nonce replaced the learned %v: %+v (%v)", second, again, err)
	}

	n, err := d.SetRemoteLocators(nidB, []RemoteLocator{{Locator: lB2, State: LocatorActive}}, lB2)
	if err != nil || n != 1 {
		t.Fatalf("SetRemoteLocators: %d, %v", n, err)
	}
	if _, err := d.SetRemoteLocators(nidC, nil, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetRemoteLocators of an unknown NID: %v", err)
	}
	all, err := d.Sessions()
	must(t, err)
	if len(all) != 1 || all[0].RemoteActive != lB2 || all[0].RemoteLocators[0].Locator != lB2 {
		t.Fatalf("sessions %+v", all)
	}
	must(t, d.DeleteSession(nidA, nidB))
	if err := d.DeleteSession(nidA, nidB); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestLocatorAndPeerAPI(t *testing.T) {
	d := newDatapath(t, Options{})
	if err := d.PutLocalLocator(LocalLocator{Locator: lA1, State: 9}); err == nil {
		t.Fatal("bad state accepted")
	}
	if err := d.PutLocalLocator(LocalLocator{Locator: lA1, State: LocatorActive, NextHop: netip.MustParseAddr("10.0.0.1")}); err == nil {
		t.Fatal("IPv4 next hop accepted")
	}
	nh := netip.MustParseAddr("fe80::1")
	must(t, d.PutLocalLocator(LocalLocator{Locator: lA1, State: LocatorActive, Ifindex: 3, NextHop: nh}))
	locs, err := d.LocalLocators()
	must(t, err)
	if len(locs) != 1 || locs[0] != (LocalLocator{Locator: lA1, State: LocatorActive, Ifindex: 3, NextHop: nh}) {
		t.Fatalf("local locators %+v", locs)
	}
	must(t, d.SetActiveLocator(lA1))
	if l, err := d.ActiveLocator(); err != nil || l != lA1 {
		t.Fatalf("active locator %v, %v", l, err)
	}
	must(t, d.DeleteLocalLocator(lA1))
	if err := d.DeleteLocalLocator(lA1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	p := Peer{Addr: addr(lB1, nidB), Active: lB1, Locators: []RemoteLocator{{Locator: lB1, State: LocatorActive}}}
	must(t, d.PutPeer(p))
	// A Locator Update for the peer's NID also updates the peer, for sessions opened later.
	if _, err := d.SetRemoteLocators(nidB, []RemoteLocator{{Locator: lB2, State: LocatorActive}}, lB2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no session yet: %v", err)
	}
	peers, err := d.Peers()
	must(t, err)
	if len(peers) != 1 || peers[0].Addr != p.Addr || peers[0].Active != lB2 || peers[0].Locators[0].Locator != lB2 {
		t.Fatalf("peers %+v", peers)
	}
	must(t, d.DeletePeer(p.Addr))
	if err := d.PutPeer(Peer{Addr: netip.MustParseAddr("10.0.0.1")}); err == nil {
		t.Fatal("IPv4 peer accepted")
	}
}

// Maps pinned in a bpffs survive a reload (sessions outlive a daemon restart) and Close
// removes them unless told to keep them.
func TestPinning(t *testing.T) {
	nstest.RequireRoot(t)
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "bpf", "bpf", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount bpffs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	dir := filepath.Join(mnt, "ilnp")
	d, err := Load(Options{PinDir: dir, KeepPinned: true})
	must(t, err)
	must(t, d.PutSession(Session{LocalNID: nidA, RemoteNID: nidB, LocalView: lA1, RemoteView: lB1}))
	want, err := d.GetSession(nidA, nidB)
	must(t, err)
	must(t, d.Close())
	if _, err := os.Stat(filepath.Join(dir, "sessions")); err != nil {
		t.Fatalf("sessions map not pinned: %v", err)
	}
	// A tool beside the daemon sees the same maps.
	tool, err := OpenPinned(dir)
	must(t, err)
	if err := tool.Attach(1); err == nil {
		t.Fatal("Attach on pinned maps accepted")
	}
	seen, err := tool.Sessions()
	must(t, err)
	if len(seen) != 1 || seen[0].LocalNonce != want.LocalNonce {
		t.Fatalf("OpenPinned sessions %+v", seen)
	}
	if _, err := tool.Counters(); err != nil {
		t.Fatal(err)
	}
	must(t, tool.Close())
	if _, err := os.Stat(filepath.Join(dir, "sessions")); err != nil {
		t.Fatalf("the tool's Close removed the pins: %v", err)
	}
	d, err = Load(Options{PinDir: dir})
	must(t, err)
	got, err := d.GetSession(nidA, nidB)
	must(t, err)
	if got.LocalNonce != want.LocalNonce {
		t.Fatalf("session after reload: %+v", got)
	}
	must(t, d.Close())
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("pin directory left behind: %v", err)
	}
}

func TestAttachDetach(t *testing.T) {
	ns := nstest.New(t, "dpAt")
	ns.Run("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	idx := ns.Ifindex("v0")
	d := newDatapath(t, Options{})
	must(t, ns.Do(func() error { return d.Attach(idx) }))
	if err := ns.Do(func() error { return d.Attach(idx) }); err == nil {
		t.Fatal("second attach accepted")
	}
	attached := func() (n int) {
		t.Helper()
		must(t, ns.Do(func() error {
			for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				r, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: at})
				if err != nil {
					return err
				}
				n += len(r.Programs)
			}
			return nil
		}))
		return n
	}
	if n := attached(); n != 2 {
		t.Fatalf("%d programs attached, want 2", n)
	}
	must(t, d.Detach(idx))
	if n := attached(); n != 0 {
		t.Fatalf("%d programs attached after Detach", n)
	}
	if err := d.Detach(idx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second detach: %v", err)
	}
}

// Sessions the datapath opens take crypto/rand nonces from the pool; when it runs dry the
// session is flagged weak, the daemon is told, and the Events reader refills the pool.
func TestNoncePool(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, false)
	open := func(remote wire.NID) Session {
		t.Helper()
		from, to := addr(lB2, remote), addr(lA2, nidA)
		in := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: remote}, wire.ILV{Locator: lA2, NID: nidA}, mustNonce(t, 7, 7, 7, 7),
			wire.ProtoUDP, wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, payload)))
		if ret, _ := d.ingress(t, in); ret != verdictNext {
			t.Fatalf("verdict %d", ret)
		}
		s, err := d.GetSession(nidA, remote)
		must(t, err)
		return s
	}
	s1, s2 := open(nidB), open(nidC)
	if s1.LocalNonce == s2.LocalNonce || s1.Flags&SessionWeakNonce != 0 {
		t.Fatalf("pool nonces %v %v flags %v", s1.LocalNonce, s2.LocalNonce, s1.Flags)
	}
	var n [12]byte
	for d.objs.NoncePool.LookupAndDelete(nil, &n) == nil {
	}
	ev := events(t, d)
	s3 := open(wire.NID(0x1234))
	if s3.Flags&SessionWeakNonce == 0 || s3.LocalNonce.Len() != 4 {
		t.Fatalf("session from an empty pool: %+v", s3)
	}
	nextEvent(t, ev, EventNoncePoolEmpty)
	if c := counter(t, d, "nonce_pool_empty"); c != 1 {
		t.Fatalf("nonce_pool_empty = %d", c)
	}
	waitFor(t, 2*time.Second, func() bool {
		var v [12]byte
		return d.objs.NoncePool.Lookup(nil, &v) == nil
	}, "the Events reader to refill the pool")
}

// One Events reader at a time; Close ends it.
func TestEventsReaderLifecycle(t *testing.T) {
	nstest.RequireRoot(t)
	d, err := Load(Options{})
	must(t, err)
	ch, err := d.Events(context.Background())
	must(t, err)
	if _, err := d.Events(context.Background()); err == nil {
		t.Fatal("second reader accepted")
	}
	must(t, d.Close())
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("event after Close")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not end the Events reader")
	}
}

func TestNames(t *testing.T) {
	if s := (SessionSoft | SessionWeakNonce | 1<<20).String(); s != "soft,weak-nonce,0x100000" {
		t.Fatalf("flags %q", s)
	}
	if EventBadNonce.String() != "bad-nonce" || EventType(99).String() != "event(99)" || LocatorAged.String() != "aged" {
		t.Fatal("names")
	}
	if ev, err := decodeEvent(make([]byte, 10)); err == nil {
		t.Fatalf("short event decoded: %+v", ev)
	}
}

// SetRemoteLocatorsOf writes the sessions of the given local NIDs with the remote by key: two
// local NIDs (a stable and an ephemeral one) with the same remote both change, a session of
// another remote does not, and a local NID without a session is no error while another has one.
func TestSetRemoteLocatorsOf(t *testing.T) {
	d := newDatapath(t, Options{})
	eph := wire.NID(0x0a00_0000_0000_0e01)
	for _, k := range [][2]wire.NID{{nidA, nidB}, {eph, nidB}, {nidA, nidC}} {
		must(t, d.PutSession(Session{LocalNID: k[0], RemoteNID: k[1], LocalView: lA1, RemoteView: lB1,
			RemoteLocators: []RemoteLocator{{Locator: lB1, State: LocatorActive}}}))
	}
	set := []RemoteLocator{{Locator: lB2, State: LocatorActive}, {Locator: lB1, State: LocatorValid}}
	if n, err := d.SetRemoteLocatorsOf([]wire.NID{nidA, eph, wire.NID(0x77)}, nidB, set, lB2); err != nil || n != 2 {
		t.Fatalf("SetRemoteLocatorsOf: %d, %v", n, err)
	}
	for _, k := range [][2]wire.NID{{nidA, nidB}, {eph, nidB}} {
		s, err := d.GetSession(k[0], k[1])
		must(t, err)
		if s.RemoteActive != lB2 || len(s.RemoteLocators) != 2 || s.RemoteLocators[0].Locator != lB2 {
			t.Fatalf("session %v-%v not updated: %+v", k[0], k[1], s)
		}
	}
	s, err := d.GetSession(nidA, nidC)
	must(t, err)
	if s.RemoteActive == lB2 || len(s.RemoteLocators) != 1 {
		t.Fatalf("another remote's session changed: %+v", s)
	}
	if _, err := d.SetRemoteLocatorsOf([]wire.NID{wire.NID(0x77)}, nidB, set, lB2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no session of that local NID: %v", err)
	}
	if _, err := d.SetRemoteLocatorsOf(nil, nidB, set, lB2); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("no local NID: %v", err)
	}
}

// embryo-table-size sizes the embryos apart from the session table (issue
// 28: at a million sessions the embryos' copy is 300 MB of kernel memory).
func TestEmbryoTableSize(t *testing.T) {
	d := newDatapath(t, Options{SessionTableSize: 4096, EmbryoTableSize: 512})
	for _, c := range []struct {
		name string
		m    interface{ MaxEntries() uint32 }
		want uint32
	}{{"sessions", d.objs.Sessions, 4096}, {"embryos", d.objs.Embryos, 512}} {
		if got := c.m.MaxEntries(); got != c.want {
			t.Errorf("%s: %d entries, want %d", c.name, got, c.want)
		}
	}
}
