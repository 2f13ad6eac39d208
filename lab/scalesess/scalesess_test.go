package scalesess

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/lab"
	"ilnp/lab/linkemu"
)

func TestMain(m *testing.M) {
	linkemu.RunIfRequested()
	os.Exit(m.Run())
}

// TestScaleSmall is `ilnp-lab scale` small (1,000 sessions, 500 LUs, 50 correspondents): the
// invariants the full run must keep, with generous bounds and no timing assertion: every
// session opened, every LU answered, the bystander flow loses nothing, the fan-out's every LU
// acknowledged without a send error, no session lost across a restart; and scale.json keeps
// its contract.
func TestScaleSmall(t *testing.T) {
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd", "ethtool", "getent")
	root, err := lab.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := lab.BuildBinaries(root, bin); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg := Config{Out: out, BinDir: bin, Sessions: 1000, LURate: 500, LUDuration: time.Second, Correspondents: 50,
		OpenRate: 1000, Log: testWriter{t}}
	r, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := r.Notes
	if n.Opened != cfg.Sessions {
		t.Errorf("the CN opened %d of %d sessions", n.Opened, cfg.Sessions)
	}
	if r.LUsSent != 500 || r.LUsAcked != r.LUsSent {
		t.Errorf("mass move: %d LUs sent (want 500), %d acknowledged", r.LUsSent, r.LUsAcked)
	}
	if n.BystanderSent < 1000 || r.BystanderLost != 0 {
		t.Errorf("bystander flow: %d sent, %d lost", n.BystanderSent, r.BystanderLost)
	}
	if n.FanoutAcked != cfg.Correspondents || n.FanoutSendErrors != 0 || r.FanoutMs <= 0 {
		t.Errorf("fan-out: %d of %d correspondents acknowledged, %d send errors, %.1f ms",
			n.FanoutAcked, cfg.Correspondents, n.FanoutSendErrors, r.FanoutMs)
	}
	if n.RestartBefore < cfg.Sessions || n.RestartAdopted < n.RestartBefore || n.RestartAfter != n.RestartBefore || r.AdoptMs <= 0 {
		t.Errorf("restart: %d sessions before, %d adopted, %d after, adopt %.1f ms", n.RestartBefore, n.RestartAdopted, n.RestartAfter, r.AdoptMs)
	}
	if r.EgressNsPerPkt <= 0 || r.IngressNsPerPkt <= 0 || r.KernelBytesPerSession <= 0 {
		t.Errorf("per packet %.0f / %.0f ns, kernel %.0f bytes per session", r.EgressNsPerPkt, r.IngressNsPerPkt, r.KernelBytesPerSession)
	}
	b, err := os.ReadFile(filepath.Join(out, "scale.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"adopt_ms", "bystander_lost", "daemon_bytes_per_session", "egress_ns_per_pkt", "fanout_correspondents",
		"fanout_ms", "ingress_ns_per_pkt", "kernel_bytes_per_session", "lu_ack_p50_ms", "lu_ack_p99_ms", "lu_rate",
		"lus_acked", "lus_sent", "sessions"}
	if !slices.Equal(keys, want) {
		t.Errorf("scale.json has %v, want exactly %v", keys, want)
	}
	md, err := os.ReadFile(filepath.Join(out, "scale.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range want {
		if !strings.Contains(string(md), "| "+k+" |") {
			t.Errorf("scale.md has no row %s", k)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The CN's tables hold the sessions and the bystander within ilnpd.conf(5)'s bounds, sized as
// its SIZING has a user set them (a million sessions: session-table-size 1048576, embryos 65536).
func TestTableSizes(t *testing.T) {
	for _, tc := range []struct{ sessions, table, embryos int }{
		{1, 257, 257},
		{1000, 1318, 1318},
		{100_000, 106_506, 65536},
		{1_000_000, 1 << 20, 65536},
	} {
		if got := TableSize(tc.sessions); got != tc.table || got < tc.sessions+1 {
			t.Errorf("TableSize(%d) = %d, want %d", tc.sessions, got, tc.table)
		}
		if got := EmbryoTableSize(tc.sessions); got != tc.embryos {
			t.Errorf("EmbryoTableSize(%d) = %d, want %d", tc.sessions, got, tc.embryos)
		}
	}
	if _, err := Run(context.Background(), Config{Out: t.TempDir(), Sessions: 1 << 20}); err == nil {
		t.Error("a run of 1048576 sessions, which cannot fit with the bystander, was not refused")
	}
}

// The waits a run makes at a million sessions grow with them; at 100,000 and below they are
// what the defaults' runs were measured with.
func TestScaledWaits(t *testing.T) {
	for _, tc := range []struct {
		n             int
		scaled, stall time.Duration
	}{
		{1000, 30 * time.Second, 6 * time.Second},
		{100_000, 30 * time.Second, 6 * time.Second},
		{1_000_000, 300 * time.Second, 20 * time.Second},
	} {
		if got := scaled(30*time.Second, tc.n); got != tc.scaled {
			t.Errorf("scaled(30s, %d) = %v, want %v", tc.n, got, tc.scaled)
		}
		if got := stallLimit(tc.n); got != tc.stall {
			t.Errorf("stallLimit(%d) = %v, want %v", tc.n, got, tc.stall)
		}
	}
}

// tailEvents reads what was appended since the last read, whole lines only: a line the daemon
// is still writing is read once it is whole.
func TestTailEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	write := func(s string) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"t_ns":1,"type":"session_new"}` + "\n" + `{"t_ns":2,"type":"adop`)
	var off int64
	evs, err := tailEvents(path, &off)
	if err != nil || len(evs) != 1 || evs[0].MonoNS != 1 {
		t.Fatalf("first read: %+v, %v", evs, err)
	}
	write(`ted","detail":"sessions=3"}` + "\n" + "not json\n")
	evs, err = tailEvents(path, &off)
	if err != nil || len(evs) != 1 || evs[0].Kind != "adopted" || evs[0].Detail != "sessions=3" {
		t.Fatalf("second read: %+v, %v", evs, err)
	}
	if fi, err := os.Stat(path); err != nil || off != fi.Size() {
		t.Fatalf("offset %d after reading the whole file (%v)", off, err)
	}
	if evs, err = tailEvents(path, &off); err != nil || len(evs) != 0 {
		t.Fatalf("nothing new: %+v, %v", evs, err)
	}
}
