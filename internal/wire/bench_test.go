package wire

import "testing"

func BenchmarkInternetChecksum1500(b *testing.B) {
	data := make([]byte, 1500)
	for i := range data {
		data[i] = byte(i)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		InternetChecksum(0, data)
	}
}

func BenchmarkParseDestOpts(b *testing.B) {
	n, _ := NonceFromBytes([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	hdr := AppendNonceHeader(nil, ProtoUDP, n)
	for b.Loop() {
		if _, err := ParseDestOpts(hdr); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParsePacket(b *testing.B) {
	n, _ := NonceFromBytes([]byte{1, 2, 3, 4})
	pkt := AppendILNPPacket(nil, pktMN, pktCN, n, ProtoUDP, AppendUDP(nil, pktMN.Addr(), pktCN.Addr(), 1, 2, make([]byte, 1400)))
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		p, err := ParsePacket(pkt)
		if err != nil {
			b.Fatal(err)
		}
		if ok, _ := p.ChecksumOK(pkt); !ok {
			b.Fatal("bad checksum")
		}
	}
}

func BenchmarkLocatorUpdateMarshal(b *testing.B) {
	for b.Loop() {
		if _, err := luTwo.Marshal(luSrc, luDst); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseLocatorUpdate(b *testing.B) {
	msg, _ := luTwo.Marshal(luSrc, luDst)
	for b.Loop() {
		if _, err := ParseLocatorUpdate(msg, luSrc, luDst, LUParseOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
