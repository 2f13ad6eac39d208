package rendezvous

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"ilnp/internal/encap"
	"ilnp/internal/wire"
)

// The UPDATE messages byte for byte (RFC 2136 s.2; NID, L64 and L32 rdata RFC 6742 s.2.1-2.3;
// no name compression; message ID zeroed, the TSIG record is the exchanger's) as an IPv4
// locator comes and goes beside an IPv6 one.
func TestUpdateMessageBytes(t *testing.T) {
	const (
		// Header: ID 0, opcode UPDATE (5 << 11), ZOCOUNT 1, PRCOUNT 3, UPCOUNT 3, ADCOUNT 0.
		hdr3 = "0000" + "2800" + "0001" + "0003" + "0003" + "0000"
		// Zone section: t. SOA IN.
		zone = "01740000060001"
		name = "026d6e017400" // mn.t.
		// Type, class, TTL 0.
		nidIN, nidNONE = "0068" + "0001" + "00000000", "0068" + "00fe" + "00000000"
		l64IN, l64NONE = "006a" + "0001" + "00000000", "006a" + "00fe" + "00000000"
		l32IN, l32NONE = "0069" + "0001" + "00000000", "0069" + "00fe" + "00000000"
		// Rdata with its length: NID 10 0214:4fff:fe20:ee64; L64 0 2001:db8:2:0; L32 1 10.0.0.2.
		nidRdata = "000a" + "000a" + "02144ffffe20ee64"
		l64Rdata = "000a" + "0000" + "20010db800020000"
		l32Rdata = "0006" + "0001" + "0a000002"
		noRdata  = "0000"
	)
	nid := wire.NID(0x0214_4fff_fe20_ee64)
	l2 := wire.L64(0x2001_0db8_0002_0000)
	v4, err := encap.L32(netip.MustParseAddrPort("10.0.0.2:49191"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPublisher(PublisherConfig{Name: "mn.t.", Zone: "t.", Server: "::1"})
	if err != nil {
		t.Fatal(err)
	}
	only6 := p.wantRRs(&desired{nid: nid, locs: []LocatorEntry{{l2, 0}}})
	both := p.wantRRs(&desired{nid: nid, locs: []LocatorEntry{{l2, 0}, {v4, 1}}})
	for _, c := range []struct {
		name       string
		have, want *rrsets
		bytes      []string
	}{
		{"first publish: no RRset may exist, all three added", &rrsets{}, both, []string{hdr3, zone,
			name + nidNONE + noRdata, name + l64NONE + noRdata, name + l32NONE + noRdata,
			name + nidIN + nidRdata, name + l64IN + l64Rdata, name + l32IN + l32Rdata}},
		{"IPv4 locator comes: L32 RRset must not exist, then added", only6, both, []string{hdr3, zone,
			name + nidIN + nidRdata, name + l64IN + l64Rdata, name + l32NONE + noRdata,
			name + nidIN + nidRdata, name + l64IN + l64Rdata, name + l32IN + l32Rdata}},
		{"IPv4 locator goes: L32 RRset must be exactly it, then deleted (class NONE)", both, only6, []string{hdr3, zone,
			name + nidIN + nidRdata, name + l64IN + l64Rdata, name + l32IN + l32Rdata,
			name + nidIN + nidRdata, name + l64IN + l64Rdata, name + l32NONE + l32Rdata}},
		{"IPv4 locator alone replaces the IPv6 one", only6, p.wantRRs(&desired{nid: nid, locs: []LocatorEntry{{v4, 1}}}), []string{hdr3, zone,
			name + nidIN + nidRdata, name + l64IN + l64Rdata, name + l32NONE + noRdata,
			name + nidIN + nidRdata, name + l32IN + l32Rdata, name + l64NONE + l64Rdata}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := updateMsg("t.", "mn.t.", c.have, c.want)
			m.Id = 0
			got, err := m.Pack()
			if err != nil {
				t.Fatal(err)
			}
			want, err := hex.DecodeString(strings.Join(c.bytes, ""))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("UPDATE\n got %x\nwant %x\n%v", got, want, m)
			}
		})
	}
}

// Only IPv4 locators on the default port can be published: an L32 record has no port.
func TestPublishRejectsIPv4LocatorOnOtherPort(t *testing.T) {
	p, err := NewPublisher(PublisherConfig{Name: "mn.ilnp.test.", Zone: "ilnp.test.", Server: "::1"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := encap.L32(netip.MustParseAddrPort("198.51.100.2:4500"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(context.Background(), testNID, []LocatorEntry{{wire.L64(0x2001_0db8_0002_0000), 0}, {other, 1}}); err == nil ||
		!strings.Contains(err.Error(), "no port") {
		t.Fatalf("Publish with %v: %v, want refused (no port in an L32 record)", other, err)
	}
	if st := p.Status(); st.Wanted != 0 {
		t.Fatalf("a refused set became wanted: %+v", st)
	}
	if d := describe(&desired{nid: testNID, locs: []LocatorEntry{{wire.L64(0x2001_0db8_0002_0000), 0}, {mustL32(t, "10.0.0.2:49191"), 1}}}); d !=
		"nid=0014:4fff:ff20:ee64 l64=2001:0db8:0002:0000/0 l32=10.0.0.2/1" {
		t.Fatalf("describe = %q", d)
	}
}

func mustL32(t *testing.T, ep string) wire.L64 {
	t.Helper()
	l, err := encap.L32(netip.MustParseAddrPort(ep))
	if err != nil {
		t.Fatal(err)
	}
	return l
}
