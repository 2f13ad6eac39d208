package datapath

import (
	"bytes"
	"encoding/binary"
	"testing"

	"ilnp/internal/wire"
)

// FuzzPrograms feeds arbitrary frames to both programs: they never fail, answer only with
// known verdicts, and a packet they let through is either untouched or changed by exactly the
// nonce header (or, on ingress, the nonce turned into padding in place).
func FuzzPrograms(f *testing.F) {
	h := hostA(f, 4)
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	f.Add(frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoTCP, tcpSegment(h.viewSrc(), h.viewDst(), payload))))
	f.Add(frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, h.peerNonce, wire.ProtoUDP,
		wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, payload))))
	f.Add(frame(ipv6Packet(from, to, wire.ProtoDestOpts, []byte{wire.ProtoUDP, 1, 0x8b, 4, 0xb1, 0xb2, 0xb3, 0xb4, 0x1e, 2, 0, 0, 1, 2, 0, 0},
		wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, payload))))
	f.Add(frame(ipv6Packet(from, to, wire.ProtoFragment, []byte{wire.ProtoUDP, 0, 0, 64, 0, 0, 0, 1}, payload)))
	d := newDatapath(f, Options{})
	h.setup(f, d, true)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 14+40 || len(in) > 1514 {
			return // BPF_PROG_TEST_RUN refuses short and page-sized frames (EINVAL)
		}
		for _, dir := range []string{"egress", "ingress"} {
			var ret uint32
			var out []byte
			if dir == "egress" {
				ret, out = d.egress(t, in)
			} else {
				ret, out = d.ingress(t, in)
			}
			switch ret {
			case verdictDrop:
				continue
			case verdictNext, verdictRedirect:
			default:
				t.Fatalf("%s: verdict %d", dir, ret)
			}
			if bytes.Equal(out, in) {
				continue
			}
			if !bytes.Equal(out[:14], in[:14]) {
				t.Fatalf("%s: Ethernet header changed", dir)
			}
			delta := len(out) - len(in)
			switch {
			case dir == "egress" && delta == 8:
			case dir == "ingress" && (delta == 0 || delta <= -8):
			default:
				t.Fatalf("%s: length changed by %d", dir, delta)
			}
		}
	})
}

// FuzzDecodeEvent: ring buffer records of any size decode or fail cleanly, and a decoded
// event's fields come from the record's bytes.
func FuzzDecodeEvent(f *testing.F) {
	rec := make([]byte, eventSize)
	rec[8] = byte(EventBadNonce)
	copy(rec[16:], []byte{0x02, 0x1b, 0x21, 0xff, 0xfe, 0x67, 0x97, 0xa8})
	f.Add(rec)
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := decodeEvent(b)
		if len(b) < eventSize {
			if err == nil {
				t.Fatalf("%d-byte record decoded", len(b))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != EventType(binary.LittleEndian.Uint32(b[8:])) || ev.Src.As16() != [16]byte(b[32:48]) ||
			ev.MTU != int(binary.LittleEndian.Uint32(b[64:])) {
			t.Fatalf("decoded %+v from % x", ev, b)
		}
	})
}
