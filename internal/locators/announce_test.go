package locators

import (
	"bytes"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/ndp"
)

// The unsolicited Neighbor Advertisement byte for byte (RFC 4861 s.4.4): type 136, code 0,
// the checksum left to the kernel, flags R=0 S=0 and O as the DAD mode says, the target, and
// a Target Link-Layer Address option (type 2, length 1 = 8 bytes) when the link has one.
func TestUnsolicitedNABytes(t *testing.T) {
	target := netip.MustParseAddr("2001:db8:2::214:4fff:fe20:ee64")
	mac := net.HardwareAddr{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}
	const tgt = "20010db80002000002144ffffe20ee64"
	for _, c := range []struct {
		name       string
		mac        net.HardwareAddr
		optimistic bool
		want       string
	}{
		{"optimistic: O=0 (RFC 4429 s.3.3)", mac, true, "88000000" + "00000000" + tgt + "0201021122334455"},
		{"no DAD: O=1", mac, false, "88000000" + "20000000" + tgt + "0201021122334455"},
		{"no link-layer address: no option", nil, true, "88000000" + "00000000" + tgt},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := ndp.MarshalMessage(unsolicitedNA(target, c.mac, c.optimistic))
			if err != nil {
				t.Fatal(err)
			}
			want, err := hex.DecodeString(c.want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, want) {
				t.Fatalf("NA\n got %x\nwant %x", b, want)
			}
		})
	}
}

// A router that was resolving the address before it formed (packets to it queued, its entry
// INCOMPLETE) learns the host's link-layer address from the unsolicited NA, not from a
// solicitation of its own: the router's NS retransmission timer is 30 s here, so its next NS
// is far beyond the wait, and a solicited answer would make the entry REACHABLE, not STALE.
func TestAnnounceResolvesRouter(t *testing.T) {
	l := newLab(t, DADOptimistic)
	l.wait(t, "initial link up", 3*time.Second, func(e Event) bool { c, ok := e.(LinkChange); return ok && c.Up })
	want := netip.MustParseAddr("2001:db8:7::214:4fff:fe20:ee64")
	l.router.Run("sysctl", "-qw", "net.ipv6.neigh.r0.retrans_time_ms=30000")
	l.router.Run("ip", "addr", "add", "2001:db8:7::1/64", "dev", "r0", "nodad")
	// One packet for the address before it exists: the router's entry goes INCOMPLETE.
	err := l.router.Do(func() error {
		c, err := net.Dial("udp6", netip.AddrPortFrom(want, 9).String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("x"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if out := l.router.Run("ip", "-6", "neigh", "show", "dev", "r0", "to", want.String()); !strings.Contains(out, "INCOMPLETE") {
		t.Fatalf("router's entry for %v before the address formed: %q, want INCOMPLETE", want, out)
	}
	mac := strings.TrimSpace(l.host.Run("cat", "/sys/class/net/h0/address"))

	l.startRadvd(t, "2001:db8:7::/64")
	l.wait(t, "address formed", 10*time.Second, func(e Event) bool { f, ok := e.(AddressFormed); return ok && f.Addr == want })
	var out string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		out = l.router.Run("ip", "-6", "neigh", "show", "dev", "r0", "to", want.String())
		if strings.Contains(out, "lladdr") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// STALE from the advertisement, DELAY once the queued packet went out on it.
	if !strings.Contains(out, "lladdr "+mac) || !(strings.Contains(out, "STALE") || strings.Contains(out, "DELAY")) {
		t.Fatalf("router's entry for %v after the address formed: %q, want lladdr %s STALE or DELAY", want, out, mac)
	}
	t.Logf("router's entry: %s", strings.TrimSpace(out))
	l.stop(t)
}
