package wire

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func mustNonce(t testing.TB, b ...byte) Nonce {
	t.Helper()
	n, err := NonceFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAppendNonceHeader(t *testing.T) {
	n4 := mustNonce(t, 0xde, 0xad, 0xbe, 0xef)
	n12 := mustNonce(t, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
	for _, tc := range []struct {
		n    Nonce
		nh   uint8
		want []byte
	}{
		{n4, ProtoUDP, []byte{17, 0, 0x8b, 4, 0xde, 0xad, 0xbe, 0xef}},
		{n12, ProtoTCP, []byte{6, 1, 0x8b, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		{Nonce{}, ProtoICMPv6, []byte{58, 0, 1, 4, 0, 0, 0, 0}},
	} {
		prefix := []byte{0xaa}
		got := AppendNonceHeader(prefix, tc.nh, tc.n)
		if !bytes.Equal(got, append([]byte{0xaa}, tc.want...)) {
			t.Errorf("AppendNonceHeader(%d, %v) = % x, want aa % x", tc.nh, tc.n, got, tc.want)
		}
		d, err := ParseDestOpts(got[1:])
		if err != nil {
			t.Fatalf("ParseDestOpts(own header % x): %v", got[1:], err)
		}
		if d.NextHeader != tc.nh || d.Length != len(tc.want) || d.HasNonce == tc.n.IsZero() || d.Nonce != tc.n {
			t.Errorf("round trip of %v: %+v", tc.n, d)
		}
	}
}

func TestParseDestOpts(t *testing.T) {
	n4 := mustNonce(t, 0xde, 0xad, 0xbe, 0xef)
	n12 := mustNonce(t, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
	calipso := []byte{0x07, 8, 0, 0, 0, 1, 0, 0, 0, 0} // RFC 5570: DOI 1, cmpt len 0, sens 0, checksum 0, bitmap none
	for _, tc := range []struct {
		name    string
		in      []byte
		want    DestOpts
		wantErr string
	}{
		{name: "4-byte nonce", in: []byte{17, 0, 0x8b, 4, 0xde, 0xad, 0xbe, 0xef},
			want: DestOpts{NextHeader: 17, Length: 8, Nonce: n4, HasNonce: true, NonceOffset: 2}},
		{name: "12-byte nonce then payload", in: []byte{6, 1, 0x8b, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0xff, 0xff},
			want: DestOpts{NextHeader: 6, Length: 16, Nonce: n12, HasNonce: true, NonceOffset: 2}},
		{name: "after Pad1s", in: []byte{17, 1, 0, 0, 0x8b, 4, 0xde, 0xad, 0xbe, 0xef, 1, 4, 0, 0, 0, 0},
			want: DestOpts{NextHeader: 17, Length: 16, Nonce: n4, HasNonce: true, NonceOffset: 4}},
		{name: "after PadN", in: []byte{17, 1, 1, 0, 0x8b, 4, 0xde, 0xad, 0xbe, 0xef, 1, 4, 0, 0, 0, 0},
			want: DestOpts{NextHeader: 17, Length: 16, Nonce: n4, HasNonce: true, NonceOffset: 4}},
		{name: "after CALIPSO", in: slices.Concat([]byte{17, 2}, calipso, []byte{0x8b, 4, 0xde, 0xad, 0xbe, 0xef}, []byte{1, 4, 0, 0, 0, 0}),
			want: DestOpts{NextHeader: 17, Length: 24, Nonce: n4, HasNonce: true, NonceOffset: 12, Others: []uint8{7}}},
		{name: "nonce then other option", in: []byte{17, 1, 0x8b, 4, 0xde, 0xad, 0xbe, 0xef, 0x1e, 2, 0, 0, 1, 2, 0, 0},
			want: DestOpts{NextHeader: 17, Length: 16, Nonce: n4, HasNonce: true, NonceOffset: 2, Others: []uint8{0x1e}}},
		{name: "no nonce", in: []byte{58, 0, 1, 4, 0, 0, 0, 0},
			want: DestOpts{NextHeader: 58, Length: 8}},
		{name: "other option no nonce", in: []byte{58, 0, 0xc9, 2, 0, 0, 0, 0},
			want: DestOpts{NextHeader: 58, Length: 8, Others: []uint8{0xc9}}},
		{name: "only Pad1", in: []byte{59, 0, 0, 0, 0, 0, 0, 0},
			want: DestOpts{NextHeader: 59, Length: 8}},

		{name: "empty", in: nil, wantErr: "0 bytes"},
		{name: "one byte", in: []byte{17}, wantErr: "1 bytes"},
		{name: "shorter than 8", in: []byte{17, 0, 0x8b, 4}, wantErr: "says 8 bytes, have 4"},
		{name: "Hdr Ext Len overruns", in: []byte{17, 1, 0x8b, 4, 0xde, 0xad, 0xbe, 0xef}, wantErr: "says 16 bytes, have 8"},
		{name: "option overruns header", in: []byte{17, 0, 0x8b, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, wantErr: "overruns the header by 8 bytes"},
		{name: "PadN overruns", in: []byte{17, 0, 1, 5, 0, 0, 0, 0}, wantErr: "overruns"},
		{name: "option without length byte", in: []byte{17, 0, 0, 0, 0, 0, 0, 0x8b}, wantErr: "truncated (no length byte)"},
		{name: "nonce length 8", in: []byte{17, 1, 0x8b, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 0, 0}, wantErr: "8 bytes, want 4 or 12"},
		{name: "nonce length 0", in: []byte{17, 0, 0x8b, 0, 1, 2, 0, 0}, wantErr: "0 bytes, want 4 or 12"},
		{name: "two nonces", in: []byte{17, 1, 0x8b, 4, 1, 2, 3, 4, 0x8b, 4, 1, 2, 3, 4, 1, 0}, wantErr: "second nonce option at offset 8"},
		{name: "two different-size nonces", in: slices.Concat([]byte{17, 2, 0x8b, 4, 1, 2, 3, 4, 0x8b, 12}, make([]byte, 12), []byte{0, 0}), wantErr: "second nonce"},
		{name: "nonce after Home Address option", in: slices.Concat([]byte{17, 3, 0xc9, 16}, make([]byte, 16), []byte{0x8b, 4, 1, 2, 3, 4, 1, 4, 0, 0, 0, 0}), wantErr: "preceded by option 0xc9"},
	} {
		got, err := ParseDestOpts(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "destination options: ") {
				t.Errorf("%s: ParseDestOpts(% x) = %+v, %v; want error containing %q", tc.name, tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: ParseDestOpts(% x): %v", tc.name, tc.in, err)
			continue
		}
		if got.NextHeader != tc.want.NextHeader || got.Length != tc.want.Length || got.HasNonce != tc.want.HasNonce ||
			got.Nonce != tc.want.Nonce || got.NonceOffset != tc.want.NonceOffset || !slices.Equal(got.Others, tc.want.Others) {
			t.Errorf("%s: ParseDestOpts(% x) = %+v, want %+v", tc.name, tc.in, got, tc.want)
		}
	}
}

func FuzzParseDestOpts(f *testing.F) {
	f.Add([]byte{17, 0, 0x8b, 4, 0xde, 0xad, 0xbe, 0xef})
	f.Add([]byte{6, 1, 0x8b, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{17, 2, 0x07, 8, 0, 0, 0, 1, 0, 0, 0, 0, 0x8b, 4, 1, 2, 3, 4, 1, 2, 0, 0, 0, 0})
	f.Add([]byte{17, 1, 0x8b, 4, 1, 2, 3, 4, 0x8b, 4, 1, 2, 3, 4, 1, 0})
	f.Add([]byte{17, 0, 0, 0, 0, 0, 0, 0x8b})
	f.Add([]byte{58, 0, 1, 4, 0, 0, 0, 0})
	f.Add([]byte{58, 0, 0x1e, 4, 1, 2, 3, 4})
	f.Add([]byte{58, 1, 0x1e, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDestOpts(b)
		if v, verr := LocallyVerifiedNonce(b); verr == nil &&
			(err != nil || d.HasNonce || v.IsZero() || !bytes.Contains(b[:d.Length], append([]byte{VerifiedNonceOptionType, byte(v.Len())}, v.Bytes()...))) {
			t.Fatalf("% x: LocallyVerifiedNonce %v disagrees with ParseDestOpts %+v %v", b, v, d, err)
		}
		if err != nil {
			return
		}
		if d.Length < 8 || d.Length%8 != 0 || d.Length > len(b) || d.NextHeader != b[0] {
			t.Fatalf("% x: bad length/next header %+v", b, d)
		}
		if !d.HasNonce {
			if !d.Nonce.IsZero() {
				t.Fatalf("% x: nonce without HasNonce", b)
			}
			return
		}
		off := d.NonceOffset
		if off < 2 || off+2+d.Nonce.Len() > d.Length || b[off] != NonceOptionType || int(b[off+1]) != d.Nonce.Len() ||
			!bytes.Equal(b[off+2:off+2+d.Nonce.Len()], d.Nonce.Bytes()) {
			t.Fatalf("% x: nonce %v not where NonceOffset %d says", b, d.Nonce, off)
		}
		// parse -> marshal -> parse: our own encoding carries the same nonce
		// and next header, and is byte-identical when the input was minimal.
		own := AppendNonceHeader(nil, d.NextHeader, d.Nonce)
		d2, err := ParseDestOpts(own)
		if err != nil || d2.Nonce != d.Nonce || d2.NextHeader != d.NextHeader || d2.Length != len(own) {
			t.Fatalf("% x: re-encoded % x parses as %+v, %v", b, own, d2, err)
		}
		if off == 2 && d.Length == len(own) && !bytes.Equal(b[:d.Length], own) {
			t.Fatalf("% x: minimal header re-encodes as % x", b[:d.Length], own)
		}
	})
}

func TestLocallyVerifiedNonce(t *testing.T) {
	n4 := []byte{1, 2, 3, 4}
	for _, tc := range []struct {
		name string
		in   []byte
		want []byte // nil: error
	}{
		{"marked 4 bytes", []byte{58, 0, 0x1e, 4, 1, 2, 3, 4}, n4},
		{"marked 12 bytes", []byte{58, 1, 0x1e, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		{"marked after padding", []byte{58, 1, 1, 2, 0, 0, 0x1e, 4, 1, 2, 3, 4, 1, 2, 0, 0}, n4},
		{"unchecked nonce", []byte{58, 0, 0x8b, 4, 1, 2, 3, 4}, nil},
		{"marked and unchecked", []byte{58, 1, 0x1e, 4, 1, 2, 3, 4, 0x8b, 4, 1, 2, 3, 4, 1, 0}, nil},
		{"two marked", []byte{58, 1, 0x1e, 4, 1, 2, 3, 4, 0x1e, 4, 1, 2, 3, 4, 1, 0}, nil},
		{"marked, bad length", []byte{58, 0, 0x1e, 3, 1, 2, 3, 1}, nil},
		{"padding only", []byte{58, 0, 1, 4, 0, 0, 0, 0}, nil},
		{"truncated", []byte{58, 1, 0x1e, 4, 1, 2, 3, 4}, nil},
		{"empty", nil, nil},
	} {
		got, err := LocallyVerifiedNonce(tc.in)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%s: LocallyVerifiedNonce(% x) = %v, want an error", tc.name, tc.in, got)
			}
			continue
		}
		if err != nil || !bytes.Equal(got.Bytes(), tc.want) {
			t.Errorf("%s: LocallyVerifiedNonce(% x) = %v, %v; want % x", tc.name, tc.in, got, err, tc.want)
		}
	}
}
