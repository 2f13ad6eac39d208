package pcapfile

import (
	"bytes"
	"encoding/hex"
	"testing"
	"time"
)

func TestBytes(t *testing.T) {
	got := Bytes(LinkIPv6, 1500*time.Millisecond, []byte{0x60, 1}, []byte{0x60})
	want, _ := hex.DecodeString("" +
		"d4c3b2a1" + "0200" + "0400" + "00000000" + "00000000" + "ffff0000" + "e5000000" +
		"00f1536500000000" + "02000000" + "02000000" + "6001" + // 1_700_000_000 s + 0 us
		"01f15365" + "20a10700" + "01000000" + "01000000" + "60") // +1 s + 500000 us
	if !bytes.Equal(got, want) {
		t.Fatalf("Bytes =\n%x\nwant\n%x", got, want)
	}
}
