package wire

import (
	"bytes"
	"strings"
	"testing"
)

func TestNonceFromBytes(t *testing.T) {
	for _, size := range []int{0, 1, 3, 5, 8, 11, 13, 16} {
		if n, err := NonceFromBytes(make([]byte, size)); err == nil {
			t.Errorf("NonceFromBytes(%d bytes) = %v, want error", size, n)
		}
	}
	b := []byte{0xde, 0xad, 0xbe, 0xef}
	n, err := NonceFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	b[0] = 0 // the nonce must not alias its input
	if n.Len() != 4 || n.String() != "deadbeef" || n.IsZero() || !bytes.Equal(n.Bytes(), []byte{0xde, 0xad, 0xbe, 0xef}) {
		t.Errorf("4-byte nonce: len %d %q zero=%v % x", n.Len(), n, n.IsZero(), n.Bytes())
	}
	n.Bytes()[0] = 0 // nor its output
	if n.String() != "deadbeef" {
		t.Error("Bytes aliases the nonce")
	}
	twelve := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	n12, err := NonceFromBytes(twelve)
	if err != nil || n12.Len() != 12 || n12.String() != "0102030405060708090a0b0c" {
		t.Errorf("12-byte nonce: %v %v", n12, err)
	}
	// Equality is by length and value: a 4-byte prefix differs from the 12.
	p4, _ := NonceFromBytes(twelve[:4])
	if p4 == n12 {
		t.Error("4-byte and 12-byte nonces compare equal")
	}
	again, _ := NonceFromBytes(twelve)
	if again != n12 {
		t.Error("equal nonces compare unequal")
	}
	zero4, _ := NonceFromBytes(make([]byte, 4))
	if zero4.IsZero() || zero4 == (Nonce{}) {
		t.Error("all-zero 4-byte nonce reported as no nonce")
	}
	var none Nonce
	if !none.IsZero() || none.Len() != 0 || none.Bytes() != nil || none.String() != "" {
		t.Errorf("zero Nonce: %v %d %v", none.IsZero(), none.Len(), none.Bytes())
	}
}

func TestRandomNonce(t *testing.T) {
	for _, size := range []int{4, 12} {
		a, err := RandomNonce(size)
		if err != nil {
			t.Fatal(err)
		}
		b, err := RandomNonce(size)
		if err != nil {
			t.Fatal(err)
		}
		if a.Len() != size || b.Len() != size || a == b {
			t.Errorf("RandomNonce(%d): %v %v", size, a, b)
		}
	}
	for _, size := range []int{-1, 0, 8, 16} {
		if _, err := RandomNonce(size); err == nil || !strings.Contains(err.Error(), "want 4 or 12") {
			t.Errorf("RandomNonce(%d) error = %v", size, err)
		}
	}
}

func FuzzNonceFromBytes(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4})
	f.Add(make([]byte, 12))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := NonceFromBytes(b)
		if (err == nil) != (len(b) == 4 || len(b) == 12) {
			t.Fatalf("%d bytes: err %v", len(b), err)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(n.Bytes(), b) || n.Len() != len(b) || n.IsZero() {
			t.Fatalf("% x -> %v", b, n)
		}
		d, err := ParseDestOpts(AppendNonceHeader(nil, ProtoUDP, n))
		if err != nil || d.Nonce != n {
			t.Fatalf("% x: header round trip %v, %v", b, d.Nonce, err)
		}
	})
}
