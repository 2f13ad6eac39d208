package node

import (
	"bytes"
	"testing"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"

	"ilnp/internal/locverify"
)

func echoMessage(t testing.TB, typ ipv6.ICMPType, id int, data []byte) []byte {
	b, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: 0, Data: data}}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parseEcho takes exactly this daemon's Echo Replies with a token-sized body.
func TestParseEcho(t *testing.T) {
	token := bytes.Repeat([]byte{0xab}, locverify.TokenSize)
	tests := []struct {
		name string
		msg  []byte
		ok   bool
	}{
		{"our reply", echoMessage(t, ipv6.ICMPTypeEchoReply, 0x1234, token), true},
		{"another identifier (an application's ping)", echoMessage(t, ipv6.ICMPTypeEchoReply, 0x1235, token), false},
		{"a request", echoMessage(t, ipv6.ICMPTypeEchoRequest, 0x1234, token), false},
		{"short body", echoMessage(t, ipv6.ICMPTypeEchoReply, 0x1234, token[:8]), false},
		{"long body", echoMessage(t, ipv6.ICMPTypeEchoReply, 0x1234, append(token, 0)), false},
		{"truncated", []byte{129, 0, 0}, false},
		{"empty", nil, false},
	}
	for _, tc := range tests {
		e, ok := parseEcho(tc.msg, 0x1234)
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v", tc.name, ok, tc.ok)
		}
		if ok && !bytes.Equal(e.token[:], token) {
			t.Errorf("%s: token % x", tc.name, e.token)
		}
	}
}

func FuzzParseEcho(f *testing.F) {
	f.Add(echoMessage(f, ipv6.ICMPTypeEchoReply, 0x1234, bytes.Repeat([]byte{1}, locverify.TokenSize)))
	f.Add([]byte{129, 0, 0, 0, 0x12, 0x34})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, ok := parseEcho(b, 0x1234)
		if !ok {
			return
		}
		// Whatever passes is an Echo Reply of ours whose body is the token.
		if len(b) != 8+locverify.TokenSize || b[0] != 129 || b[4] != 0x12 || b[5] != 0x34 || !bytes.Equal(b[8:], e.token[:]) {
			t.Fatalf("accepted % x as token % x", b, e.token)
		}
	})
}
