package wire

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

const thesisHosts = `# /etc/hosts with ILNPv6 entries (thesis s.3.2.2 format)
127.0.0.1	localhost
::1		localhost ip6-localhost
2001:1111:0000:0000|10,021b:21ff:fe67:97a8 ilnp-linux1
2001:2222:0000:0000|5,021b:21ff:fe67:97a8 ilnp-linux1   # preferred: lower value
2001:3333::|10,021b:21ff:fe67:97a8 ILNP-Linux1
2001:db8:1::/64|0,0014:4fff:ff20:ee64	cn cn.example.org.

`

func TestParseHosts(t *testing.T) {
	h, err := ParseHosts(strings.NewReader(thesisHosts), "/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	if h.Len() != 4 {
		t.Fatalf("Len = %d, want 4", h.Len())
	}
	// Lower preference first; equal preferences keep file order; names are
	// case-insensitive.
	want := []ILV{
		{0x2001222200000000, 0x021b21fffe6797a8},
		{0x2001111100000000, 0x021b21fffe6797a8},
		{0x2001333300000000, 0x021b21fffe6797a8},
	}
	for _, name := range []string{"ilnp-linux1", "ILNP-LINUX1", "ilnp-linux1."} {
		if got := h.Lookup(name); !slices.Equal(got, want) {
			t.Errorf("Lookup(%q) = %v, want %v", name, got, want)
		}
	}
	es := h.Entries("ilnp-linux1")
	if len(es) != 3 || es[0].Preference != 5 || es[0].Line != 5 || es[1].Line != 4 || es[2].Line != 6 || es[2].Names[0] != "ILNP-Linux1" {
		t.Errorf("Entries = %+v", es)
	}
	cn := []ILV{{0x20010db800010000, 0x00144fffff20ee64}}
	for _, name := range []string{"cn", "cn.example.org", "CN.example.org."} {
		if got := h.Lookup(name); !slices.Equal(got, cn) {
			t.Errorf("Lookup(%q) = %v, want %v", name, got, cn)
		}
	}
	if got := h.Lookup("localhost"); got != nil {
		t.Errorf("plain hosts line became an I-LV: %v", got)
	}
	if got := h.Lookup("nosuch"); got != nil {
		t.Errorf("Lookup(nosuch) = %v", got)
	}
	if got := h.LookupRanked("ilnp-linux1"); len(got) != 3 || got[0] != (RankedILV{ILV: want[0], Preference: 5}) || got[2].Preference != 10 {
		t.Errorf("LookupRanked = %v", got)
	}
	if got := h.LookupRanked("nosuch"); got != nil {
		t.Errorf("LookupRanked(nosuch) = %v", got)
	}
	if got := h.LookupAddr(cn[0]); !slices.Equal(got, []string{"cn", "cn.example.org."}) {
		t.Errorf("LookupAddr = %v", got)
	}
	if got := (Hosts{}).Lookup("x"); got != nil {
		t.Errorf("zero Hosts Lookup = %v", got)
	}
	if e := h.All()[0]; e.String() != "2001:1111:0000:0000|10,021b:21ff:fe67:97a8 ilnp-linux1" {
		t.Errorf("String = %q", e.String())
	}

	// Round trip through the text form.
	text, err := h.AppendText(nil)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := ParseHosts(strings.NewReader(string(text)), "round-trip")
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if !sameEntries(h.All(), h2.All()) {
		t.Errorf("round trip:\n%v\n%v", h.All(), h2.All())
	}
}

// sameEntries compares entries ignoring line numbers.
func sameEntries(a, b []HostEntry) bool {
	return slices.EqualFunc(a, b, func(x, y HostEntry) bool {
		return x.ILV == y.ILV && x.Preference == y.Preference && slices.Equal(x.Names, y.Names)
	})
}

func TestParseHostsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		wantLine int
		wantErr  string
	}{
		{"missing preference", "2001:1111:0000:0000,021b:21ff:fe67:97a8 h", 1, "missing |preference"},
		{"missing NID", "2001:1111:0000:0000|10 h", 1, "want L64|preference,NID"},
		{"no hostname", "\n2001:1111:0000:0000|10,021b:21ff:fe67:97a8", 2, "no hostname"},
		{"bad L64", "2001:1111:0000|10,021b:21ff:fe67:97a8 h", 1, "parse L64"},
		{"L64 that is an address", "2001:1111::1|10,021b:21ff:fe67:97a8 h", 1, "low 64 bits are not zero"},
		{"bad NID", "2001:1111:0000:0000|10,021b::97a8 h", 1, `parse NID "021b::97a8"`},
		{"empty preference", "2001:1111:0000:0000|,021b:21ff:fe67:97a8 h", 1, `preference ""`},
		{"negative preference", "2001:1111:0000:0000|-1,021b:21ff:fe67:97a8 h", 1, `preference "-1"`},
		{"preference too big", "2001:1111:0000:0000|65536,021b:21ff:fe67:97a8 h", 1, `preference "65536": want an integer 0 to 65535`},
		{"hex preference", "2001:1111:0000:0000|0x10,021b:21ff:fe67:97a8 h", 1, `preference "0x10"`},
		{"bad hostname", "2001:1111:0000:0000|10,021b:21ff:fe67:97a8 h/x", 1, `hostname "h/x": character '/'`},
		{"dot hostname", "2001:1111:0000:0000|10,021b:21ff:fe67:97a8 .", 1, `hostname ".": empty`},
		{"long hostname", "2001:1111:0000:0000|10,021b:21ff:fe67:97a8 " + strings.Repeat("a", 254), 1, "longer than 253"},
		{"not an I-LV", "# c\nlocalhost 127.0.0.1", 2, `"localhost": want L64|preference,NID`},
		{"duplicate", "2001:1111::|10,021b:21ff:fe67:97a8 h\n2001:1111:0:0|20,021b:21ff:fe67:97a8 H", 2, "H: I-LV 2001:1111:0000:0000,021b:21ff:fe67:97a8 already listed on line 1"},
		{"I-LV split by blanks", "2001:1111:: |10,021b:21ff:fe67:97a8 h", 1, "without blanks"},
		{"line too long", "2001:1111::|10,021b:21ff:fe67:97a8 h\n" + strings.Repeat("x", 5000), 2, "line longer than 4096 bytes"},
	} {
		h, err := ParseHosts(strings.NewReader(tc.in), "test.hosts")
		var he *HostsError
		if err == nil || !errors.As(err, &he) {
			t.Errorf("%s: ParseHosts = %v, %v; want a HostsError", tc.name, h.All(), err)
			continue
		}
		if he.File != "test.hosts" || he.Line != tc.wantLine || !strings.Contains(he.Reason, tc.wantErr) {
			t.Errorf("%s: error %q (line %d), want test.hosts line %d containing %q", tc.name, err, he.Line, tc.wantLine, tc.wantErr)
		}
		if want := "test.hosts:" + itoa(tc.wantLine) + ": "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: error %q does not start with %q", tc.name, err, want)
		}
		if h.Len() != 0 {
			t.Errorf("%s: a rejected file still returned %d entries", tc.name, h.Len())
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestParseHostsReportsEveryBadLine(t *testing.T) {
	in := "bad1 h\n2001:1111::|10,021b:21ff:fe67:97a8 ok\nbad3 h\n"
	_, err := ParseHosts(strings.NewReader(in), "f")
	if err == nil || !strings.Contains(err.Error(), "f:1: ") || !strings.Contains(err.Error(), "f:3: ") || strings.Contains(err.Error(), "f:2:") {
		t.Fatalf("error = %v, want lines 1 and 3", err)
	}
	_, err = ParseHosts(strings.NewReader(strings.Repeat("bad h\n", 100)), "f")
	if n := strings.Count(err.Error(), "\n") + 1; n != maxHostsErrors {
		t.Errorf("%d errors reported, want the cap %d", n, maxHostsErrors)
	}
}

func TestParseHostsReadError(t *testing.T) {
	r := iotest.TimeoutReader(strings.NewReader("2001:1111::|10,021b:21ff:fe67:97a8 h\n" + strings.Repeat("# pad\n", 200)))
	_, err := ParseHosts(r, "slow.hosts")
	if err == nil || !strings.Contains(err.Error(), "slow.hosts: read after line") || !errors.Is(err, iotest.ErrTimeout) {
		t.Fatalf("error = %v", err)
	}
}

func FuzzParseHosts(f *testing.F) {
	f.Add(thesisHosts)
	f.Add("2001:1111:0000:0000|10,021b:21ff:fe67:97a8 ilnp-linux1\n")
	f.Add("2001:1111::|1,0:0:0:1 a b c\n2001:2222::|0,0:0:0:1 a\n")
	f.Add("x|1,2 h\n")
	f.Add("198.51.100.2|20,0214:4fff:fe20:cc01 cn\n198.51.100.2:4500|30,0214:4fff:fe20:cc01 cn\n")
	f.Add("2001:1111::|10,021b:21ff:fe67:97a8 h\n2001:1111::|10,021b:21ff:fe67:97a8 h\n")
	f.Fuzz(func(t *testing.T, in string) {
		h, err := ParseHosts(strings.NewReader(in), "fuzz")
		if err != nil {
			var he *HostsError
			if !errors.As(err, &he) || he.File != "fuzz" || he.Line < 1 {
				t.Fatalf("error without file and line: %v", err)
			}
			return
		}
		text, err := h.AppendText(nil)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := ParseHosts(strings.NewReader(string(text)), "again")
		if err != nil {
			t.Fatalf("%q -> %q: %v", in, text, err)
		}
		if !sameEntries(h.All(), h2.All()) {
			t.Fatalf("%q -> %q: entries differ", in, text)
		}
		for _, e := range h.All() {
			for _, n := range e.Names {
				es := h.Entries(n)
				if !slices.Equal(h.Lookup(n), h2.Lookup(n)) || len(es) == 0 {
					t.Fatalf("Lookup(%q) differs after round trip", n)
				}
				if !slices.IsSortedFunc(es, func(a, b HostEntry) int { return int(a.Preference) - int(b.Preference) }) {
					t.Fatalf("Entries(%q) not ordered by preference: %v", n, es)
				}
			}
		}
	})
}

func TestHostsIPv4Locators(t *testing.T) {
	in := "2001:db8:1::|10,0214:4fff:fe20:cc01 cn\n" +
		"198.51.100.2|20,0214:4fff:fe20:cc01 cn\n" +
		"198.51.100.2:4500|30,0214:4fff:fe20:cc01 cn\n"
	h, err := ParseHosts(strings.NewReader(in), "hosts")
	if err != nil {
		t.Fatal(err)
	}
	got := h.Entries("cn")
	want := []L64{0x20010db8_00010000, 0x0000_c027_c633_6402, 0x0000_1194_c633_6402}
	if len(got) != len(want) {
		t.Fatalf("entries %v", got)
	}
	for i, e := range got {
		if e.ILV.Locator != want[i] {
			t.Errorf("entry %d: locator %v, want %v", i, e.ILV.Locator, want[i])
		}
	}
	for _, bad := range []string{
		"0.0.0.0|1,0214:4fff:fe20:cc01 x\n",
		"198.51.100.2:0|1,0214:4fff:fe20:cc01 x\n",
		"198.51.100.2:99999|1,0214:4fff:fe20:cc01 x\n",
		"198.51.100|1,0214:4fff:fe20:cc01 x\n",
		"[2001:db8::1]:53|1,0214:4fff:fe20:cc01 x\n",
	} {
		if _, err := ParseHosts(strings.NewReader(bad), "hosts"); err == nil || !strings.Contains(err.Error(), "hosts:1:") {
			t.Errorf("%q: error %v, want one naming hosts:1", bad, err)
		}
	}
}
