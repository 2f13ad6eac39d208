package attack

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
	"ilnp/lab"
	"ilnp/lab/linkemu"
)

func TestMain(m *testing.M) {
	linkemu.RunIfRequested()
	os.Exit(m.Run())
}

// TestAttacksDuringLiveFlow runs every attack of `ilnp-lab attack` (40 packets each; the ping
// flood 1 s at 400/s) against the lab during a live TCP flow: nothing is accepted, the victims'
// counters account for every packet sent, the flow survives, and attack.json keeps its
// contract. Then the control: an on-path attacker who knows the session's nonce gets a
// datagram delivered and resets the flow with the same forged packets, so the measurements
// above can see an accepted packet.
func TestAttacksDuringLiveFlow(t *testing.T) {
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd", "ethtool", "getent", "nft")
	root, err := lab.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := lab.BuildBinaries(root, bin); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cfg := Config{Out: out, BinDir: bin, Count: 40 * (len(Names) - 1), Rate: 400, PingFlood: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	l, err := start(ctx, cfg, filepath.Join(out, "lab"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	results, err := l.attacks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(Names) {
		t.Fatalf("%d results, want one per attack (%d)", len(results), len(Names))
	}
	for i, r := range results {
		if r.Attack != Names[i] {
			t.Errorf("result %d is %q, want %q", i, r.Attack, Names[i])
		}
		want := 40
		if r.Attack == "ping-flood-fill" {
			want = 400
		}
		if *r.Sent != want {
			t.Errorf("%s: sent %d, want %d", r.Attack, *r.Sent, want)
		}
		if *r.Accepted != 0 {
			t.Errorf("%s: %d forged packets accepted (%s)", r.Attack, *r.Accepted, r.Measured)
		}
		if r.Counted != r.Expected {
			t.Errorf("%s: victim counters %v moved by %d, want %d (sent %d)", r.Attack, r.Counters, r.Counted, r.Expected, *r.Sent)
		}
		if !*r.FlowSurvived {
			t.Errorf("%s: the flow did not survive: %v", r.Attack, l.flow.Err())
		}
	}
	// The control: the same packets with the session's real nonce get through.
	rows, err := l.sessions(l.t.CN, l.cnSock)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := sessionOf(rows, l.mnAddr.NID.String())
	if !ok {
		t.Fatal("the CN has no session with the MN after the attacks")
	}
	raw, err := hex.DecodeString(s.RemoteNonce)
	if err != nil {
		t.Fatal(err)
	}
	nonce, err := wire.NonceFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := newRawSender(l.atk)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.close()
	got0 := l.sink.got.Load()
	if _, err := snd.send(ctx, 3, 100, func(int) ([]byte, error) {
		return UDP(l.mnAddr, l.cnAddr, nonce, 40000, sinkPort, []byte("on-path")), nil
	}); err != nil {
		t.Fatal(err)
	}
	seq, err := sniffAck(l.t.R1, "r1-cn", l.cnAddr.Addr(), l.mnAddr.Addr(), l.flow.ClientPort, flowPort)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snd.send(ctx, 1, 100, func(int) ([]byte, error) {
		return RST(l.mnAddr, l.cnAddr, nonce, flowPort, l.flow.ClientPort, seq), nil
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for l.flow.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if d := l.sink.got.Load() - got0; d != 3 {
		t.Errorf("control: %d of 3 datagrams with the real nonce delivered: the data measurement cannot see acceptance", d)
	}
	if l.flow.Err() == nil {
		t.Errorf("control: a reset with the real nonce and sequence %d did not end the flow: the RST attack proves nothing", seq)
	}
	t.Logf("control: flow ended by the on-path reset: %v", l.flow.Err())

	// The insider redirection, on a fresh flow: the LU is applied (the nonce is real), but
	// locator verification (internal/locverify) holds what the CN sends towards the
	// never-verified locator to 3x what came from it (nothing).
	l.flow.stop()
	if l.flow, err = startFlow(l.t.CN, l.t.MN, l.mnAddr.Addr(), flowPort); err != nil {
		t.Fatal(err)
	}
	r, err := l.redirection(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if *r.Accepted != 1 || *r.UnverifiedBytesSent > 3**r.UnverifiedBytesReceived {
		t.Errorf("redirection with the real nonce: accepted %d, %d bytes towards the announced locator against %d from it: want the LU applied and at most 3x",
			*r.Accepted, *r.UnverifiedBytesSent, *r.UnverifiedBytesReceived)
	}
	t.Logf("redirection: %d bytes CN -> announced locator in 2 s, %d from it; flow survived %v",
		*r.UnverifiedBytesSent, *r.UnverifiedBytesReceived, *r.FlowSurvived)
	// The same towards an IPv4 endpoint: the credit counts the encapsulation on the wire.
	r4, err := l.redirectionIPv4(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if *r4.Accepted != 1 || *r4.UnverifiedBytesReceived == 0 || *r4.UnverifiedBytesSent > 3**r4.UnverifiedBytesReceived {
		t.Errorf("%s: accepted %d, %d bytes towards the announced IPv4 endpoint against %d from it: want the LU applied and at most 3x",
			RedirectionIPv4, *r4.Accepted, *r4.UnverifiedBytesSent, *r4.UnverifiedBytesReceived)
	}
	t.Logf("%s: %d bytes CN -> announced IPv4 endpoint in 2 s, %d from it (%.2fx)", RedirectionIPv4,
		*r4.UnverifiedBytesSent, *r4.UnverifiedBytesReceived, float64(*r4.UnverifiedBytesSent)/float64(max(*r4.UnverifiedBytesReceived, 1)))
	if err := Write(out, append(results, r, r4), cfg); err != nil {
		t.Fatal(err)
	}
	checkSchema(t, filepath.Join(out, "attack.json"), len(Names)+2)
	if b, err := os.ReadFile(filepath.Join(out, "report.md")); err != nil || !strings.Contains(string(b), "| tcp-rst-random-nonce |") ||
		!strings.Contains(string(b), "## "+Redirection) {
		t.Errorf("report.md: %v\n%s", err, b)
	}
}

// checkSchema: attack.json is a list of objects with exactly the contract's keys, sent and
// accepted numbers, flow_survived a boolean, the unverified-bytes figures null but for the
// redirection's, which are numbers.
func checkSchema(t *testing.T, path string, want int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]json.RawMessage
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatalf("attack.json: %v", err)
	}
	if len(rows) != want {
		t.Errorf("attack.json has %d rows, want %d", len(rows), want)
	}
	keys := []string{"attack", "sent", "accepted", "flow_survived", "unverified_bytes_sent", "unverified_bytes_received"}
	for _, r := range rows {
		if len(r) != len(keys) {
			t.Errorf("attack.json row has %d keys, want %v: %v", len(r), keys, r)
		}
		for _, k := range keys {
			if _, ok := r[k]; !ok {
				t.Errorf("attack.json row lacks %q: %v", k, r)
			}
		}
		for _, k := range []string{"sent", "accepted"} {
			var n int
			if err := json.Unmarshal(r[k], &n); err != nil {
				t.Errorf("%s = %s: %v", k, r[k], err)
			}
		}
		var fs bool
		if err := json.Unmarshal(r["flow_survived"], &fs); err != nil {
			t.Errorf("flow_survived = %s: %v", r["flow_survived"], err)
		}
		var name string
		_ = json.Unmarshal(r["attack"], &name)
		for _, k := range []string{"unverified_bytes_sent", "unverified_bytes_received"} {
			var n int64
			if name == Redirection || name == RedirectionIPv4 {
				if err := json.Unmarshal(r[k], &n); err != nil || bytes.Equal(r[k], []byte("null")) {
					t.Errorf("%s: %s = %s, want a number", name, k, r[k])
				}
			} else if !bytes.Equal(r[k], []byte("null")) {
				t.Errorf("%s: %s = %s, want null (not about locator verification)", name, k, r[k])
			}
		}
	}
}
