package movement

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

var (
	home    = netip.MustParsePrefix("2001:db8:2::/64")
	foreign = netip.MustParsePrefix("2001:db8:3::/64")
	other   = netip.MustParsePrefix("2001:db8:4::/64")
	cfg     = Config{HomePrefix: home, InterfaceID: 0x001b_21ff_fe67_97a8}
	t0      = time.Unix(1_700_000_000, 0)
)

func TestDetectorThesisScenario(t *testing.T) {
	d, err := NewDetector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		ev      Event
		at      time.Duration
		loc     Location
		addr    string
		changed bool
		reason  string
	}{
		{"home RA on l2", Advertisement{Link: "l2", Prefixes: []PrefixInfo{{home, time.Hour}}}, 0, AtHome, "2001:db8:2:0:1b:21ff:fe67:97a8", true, "home prefix"},
		{"foreign RA on l3 while home", Advertisement{Link: "l3", Prefixes: []PrefixInfo{{foreign, 600 * time.Second}}}, time.Second, AtHome, "2001:db8:2:0:1b:21ff:fe67:97a8", false, ""},
		{"home link down", LinkState{Link: "l2", Up: false}, 2 * time.Second, Away, "2001:db8:3:0:1b:21ff:fe67:97a8", true, "home link lost"},
		{"another prefix on l4 does not move the node", Advertisement{Link: "l4", Prefixes: []PrefixInfo{{other, 900 * time.Second}}}, 3 * time.Second, Away, "2001:db8:3:0:1b:21ff:fe67:97a8", false, ""},
		{"l3 prefix withdrawn (lifetime 0)", Advertisement{Link: "l3", Prefixes: []PrefixInfo{{foreign, 0}}}, 4 * time.Second, Away, "2001:db8:4:0:1b:21ff:fe67:97a8", true, "l4"},
		{"l2 up again without RA is not home yet", LinkState{Link: "l2", Up: true}, 5 * time.Second, Away, "2001:db8:4:0:1b:21ff:fe67:97a8", false, ""},
		{"everything expired", Tick{}, 1000 * time.Second, Detached, "invalid IP", true, "no link"},
		{"home RA again", Advertisement{Link: "l2", Prefixes: []PrefixInfo{{home, time.Hour}}}, 1001 * time.Second, AtHome, "2001:db8:2:0:1b:21ff:fe67:97a8", true, ""},
	}
	for _, s := range steps {
		dec, changed := d.Event(s.ev, t0.Add(s.at))
		if dec.Location != s.loc || dec.Address.String() != s.addr || changed != s.changed || !strings.Contains(dec.Reason, s.reason) {
			t.Fatalf("%s: got %v %v changed=%v (%s)", s.name, dec.Location, dec.Address, changed, dec.Reason)
		}
	}
	if next := d.NextExpiry(t0.Add(1001 * time.Second)); !next.Equal(t0.Add(1001*time.Second + time.Hour)) {
		t.Fatalf("next expiry %v", next)
	}
}

func TestDecideIgnoresUnusablePrefixes(t *testing.T) {
	later := t0.Add(time.Hour)
	links := []Link{
		{Name: "a", Up: true, Prefixes: []Prefix{{netip.MustParsePrefix("fe80::/64"), later}, {netip.MustParsePrefix("2001:db8:5::/48"), later}}},
		{Name: "b", Up: false, Prefixes: []Prefix{{home, later}, {other, later}}},
		{Name: "c", Up: true, Prefixes: []Prefix{{foreign, t0}}}, // expires exactly now
	}
	if dec := Decide(cfg, Decision{}, links, t0); dec.Location != Detached {
		t.Fatalf("got %+v", dec)
	}
	links[1].Up = true
	if dec := Decide(cfg, Decision{}, links, t0); dec.Location != AtHome || dec.Link != "b" {
		t.Fatalf("got %+v", dec)
	}
	if _, err := NewDetector(Config{HomePrefix: netip.MustParsePrefix("2001:db8::/48")}); err == nil {
		t.Fatal("a /48 home prefix accepted")
	}
	if Away.String() != "away" {
		t.Fatal("String")
	}
}
