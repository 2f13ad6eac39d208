package lab

import (
	"context"
	"os"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/lab/linkemu"
)

// The testbed routes MN-CN over the emulated WAN (RTT ~200 ms) and the MN picks up L3 from
// R3's radvd once its second interface comes up.
func TestTopologyWANAndMove(t *testing.T) {
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd", "ethtool")
	ctx := context.Background()
	topo, err := Build(ctx, TopologyConfig{Scenario: Scenarios["wan-lan"], RAMin: 300 * time.Millisecond, RAMax: 600 * time.Millisecond, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := topo.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	}()
	r, err := topo.Ping(topo.MN, topo.CNAddrText, 10, 50*time.Millisecond, time.Second)
	if err != nil || len(r.RTTs) != 10 {
		t.Fatalf("ping via L2: %d replies, %v", len(r.RTTs), err)
	}
	t.Logf("RTT MN-CN via the WAN link: %.3f ms", r.MeanMS())
	if m := r.MeanMS(); m < 200 || m > 203 {
		t.Errorf("RTT %.3f ms, want 200-203 ms over the 100 ms each-way WAN link", m)
	}
	if _, err := topo.MN.Run("ip", "link", "set", IfMNR3, "up"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := topo.waitAddress(ctx, topo.MN, IfMNR3, Addr(L3, MNNID), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("L3 address %v after the interface came up", time.Since(start))
}

func TestMain(m *testing.M) {
	linkemu.RunIfRequested()
	fakeILNPd()
	code := m.Run()
	if ilnpBin != "" {
		_ = os.RemoveAll(ilnpBin)
	}
	os.Exit(code)
}

// A testbed whose core links lose 20 % each way (chapter 6's success runs) still builds: the
// neighbour warm-up tries each echo again instead of failing on the first lost one (four
// single echoes all arrived in only ~17 % of such builds).
func TestTopologyLossyCoreBuilds(t *testing.T) {
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd", "ethtool")
	sc := Scenario{Name: "lossy", R2Link: "loss=0.2", R3Link: "loss=0.2", Title: "lossy", Definition: "20 % loss on R1-R2 and R1-R3"}
	topo, err := Build(context.Background(), TopologyConfig{Scenario: sc, Access: "lan", RAMin: 300 * time.Millisecond, RAMax: 600 * time.Millisecond, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err) // Build removed what it made
	}
	if err := topo.Close(); err != nil {
		t.Errorf("teardown: %v", err)
	}
}
