package datapath

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"
)

// Maps pinned in a bpffs directory outlive a Close with KeepPinned (the signalling daemon may
// restart without losing bindings) and go with a plain Close.
func TestPinnedMapsSurviveReload(t *testing.T) {
	nstest.RequireRoot(t)
	fs := t.TempDir()
	nstest.Require(t, "a bpffs mount", unix.Mount("bpf", fs, "bpf", 0, ""))
	t.Cleanup(func() { _ = unix.Unmount(fs, 0) })
	dir := filepath.Join(fs, "mip6")

	d, err := Load(Options{PinDir: dir, KeepPinned: true})
	must(t, err)
	must(t, d.SetBinding(hoa, coa))
	must(t, d.SetHomeAgent(ha))
	must(t, d.Close())

	d, err = Load(Options{PinDir: dir})
	must(t, err)
	bs, err := d.Bindings()
	must(t, err)
	if len(bs) != 1 || bs[0].HomeAddress != hoa || bs[0].CareOf != coa {
		t.Fatalf("bindings after reload: %+v", bs)
	}
	if got, err := d.HomeAgent(); err != nil || got != ha {
		t.Fatalf("home agent after reload: %v %v", got, err)
	}
	must(t, d.Close())
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("pin directory left behind (%v): %v", err, entries)
	}
}

// ProxyND makes the HA's home-link interface answer Neighbor Solicitations for an away home
// address (RFC 6275 s.10.4.1) and stop again.
func TestProxyND(t *testing.T) {
	nstest.RequireRoot(t)
	haNS, node := nstest.New(t, "mipPHA"), nstest.New(t, "mipPN")
	nstest.Link(t, haNS, "h0", node, "n0")
	haNS.Run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	haNS.Run("ip", "addr", "add", ha.String()+"/64", "dev", "h0", "nodad")
	node.Run("ip", "addr", "add", "2001:db8:2::99/64", "dev", "n0", "nodad")
	h0 := haNS.Ifindex("h0")
	haMAC := strings.TrimSpace(haNS.Run("cat", "/sys/class/net/h0/address"))

	must(t, haNS.Do(func() error { return ProxyND(h0, hoa, true) }))
	if out := haNS.Run("ip", "-6", "neigh", "show", "proxy", "dev", "h0"); !strings.Contains(out, hoa.String()) {
		t.Fatalf("no proxy entry: %q", out)
	}
	if out := haNS.Run("sysctl", "-n", "net.ipv6.conf.h0.proxy_ndp"); strings.TrimSpace(out) != "1" {
		t.Fatalf("proxy_ndp %q", out)
	}
	// A datagram to the home address makes the node resolve it; the HA's proxy answers.
	must(t, node.Do(func() error {
		c, err := net.Dial("udp6", netip.AddrPortFrom(hoa, 9).String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("who has the home address"))
		return err
	}))
	deadline := time.Now().Add(3 * time.Second)
	for {
		out := node.Run("ip", "-6", "neigh", "show", hoa.String(), "dev", "n0")
		if strings.Contains(out, haMAC) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not resolve the home address to the HA (%s): %q", haMAC, out)
		}
		time.Sleep(20 * time.Millisecond)
	}

	must(t, haNS.Do(func() error { return ProxyND(h0, hoa, false) }))
	if out := haNS.Run("ip", "-6", "neigh", "show", "proxy", "dev", "h0"); strings.Contains(out, hoa.String()) {
		t.Fatalf("proxy entry left: %q", out)
	}
	if err := haNS.Do(func() error { return ProxyND(h0, netip.Addr{}, true) }); err == nil {
		t.Fatal("ProxyND accepted an invalid address")
	}
}
