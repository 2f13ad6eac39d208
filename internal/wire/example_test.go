package wire_test

import (
	"fmt"
	"net/netip"
	"strings"

	"ilnp/internal/wire"
)

func ExampleParseHosts() {
	const hosts = `
2001:1111:0000:0000|10,021b:21ff:fe67:97a8 ilnp-linux1
2001:2222:0000:0000|5,021b:21ff:fe67:97a8 ilnp-linux1
`
	h, err := wire.ParseHosts(strings.NewReader(hosts), "/etc/hosts")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, v := range h.Lookup("ilnp-linux1") { // lowest preference value first
		fmt.Println(v, v.Addr())
	}
	_, err = wire.ParseHosts(strings.NewReader("2001:1111::|x,0:0:0:1 h\n"), "/etc/hosts")
	fmt.Println(err)
	// Output:
	// 2001:2222:0000:0000,021b:21ff:fe67:97a8 2001:2222::21b:21ff:fe67:97a8
	// 2001:1111:0000:0000,021b:21ff:fe67:97a8 2001:1111::21b:21ff:fe67:97a8
	// /etc/hosts:1: preference "x": want an integer 0 to 65535
}

func ExampleLocatorUpdate_Marshal() {
	mn := netip.MustParseAddr("2001:db8:2::21b:21ff:fe67:97a8")
	cn := netip.MustParseAddr("2001:db8:1::14:4fff:ff20:ee64")
	lu := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{
		{Locator: 0x20010db800030000, Preference: 10, Lifetime: 300},
	}}
	msg, _ := lu.Marshal(mn, cn)
	fmt.Printf("% x\n", msg)

	// The correspondent parses it and answers with the same body.
	got, err := wire.ParseLocatorUpdate(msg, mn, cn, wire.LUParseOptions{})
	fmt.Println(got.Op, got.Locators, err)
	ack, _ := got.Ack().Marshal(cn, mn)
	fmt.Printf("% x\n", ack)
	// Output:
	// 9c 00 e0 84 01 01 00 00 20 01 0d b8 00 03 00 00 00 0a 01 2c
	// advertisement [{2001:0db8:0003:0000 10 300}] <nil>
	// 9c 00 e0 83 01 02 00 00 20 01 0d b8 00 03 00 00 00 0a 01 2c
}

func ExampleAppendNonceHeader() {
	n, _ := wire.NonceFromBytes([]byte{0xde, 0xad, 0xbe, 0xef})
	hdr := wire.AppendNonceHeader(nil, wire.ProtoUDP, n)
	fmt.Printf("% x\n", hdr)
	d, err := wire.ParseDestOpts(hdr)
	fmt.Println(d.NextHeader, d.Length, d.Nonce, err)
	// Output:
	// 11 00 8b 04 de ad be ef
	// 17 8 deadbeef <nil>
}
