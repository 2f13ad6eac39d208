package lab

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"ilnp/lab/measure"
	"ilnp/lab/pcap"
	"ilnp/lab/plots"
)

// Multihomed runs (issue 16): `ilnp-lab run --multihome` keeps both of the MN's access links up
// for the whole run (no movement), and `--fail r2-silent@T` makes R1 drop everything it would
// forward over the R1-R2 link from T on, without any link going down (the MN's link to R2
// stays up and R2 keeps advertising), until `--fail r2-restore@T2`.

// Failure kinds.
const (
	FailR2Silent  = "r2-silent"
	FailR2Restore = "r2-restore"
)

// Fail is one injected failure: its kind at a time since the flow started.
type Fail struct {
	Kind string
	At   time.Duration
}

func (f Fail) String() string { return fmt.Sprintf("%s@%v", f.Kind, f.At) }

// ParseFail reads KIND@T, T a Go duration ("3s", "2500ms") or plain seconds ("3", "2.5").
func ParseFail(s string) (Fail, error) {
	kind, at, ok := strings.Cut(strings.TrimSpace(s), "@")
	if !ok {
		return Fail{}, fmt.Errorf("--fail %q: want KIND@TIME, e.g. r2-silent@4s", s)
	}
	if kind != FailR2Silent && kind != FailR2Restore {
		return Fail{}, fmt.Errorf("--fail %q: kind %q: want %s or %s", s, kind, FailR2Silent, FailR2Restore)
	}
	d, err := time.ParseDuration(at)
	if err != nil {
		secs, ferr := strconv.ParseFloat(at, 64)
		if ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return Fail{}, fmt.Errorf("--fail %q: time %q: want a duration like 4s", s, at)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 || d > time.Hour {
		return Fail{}, fmt.Errorf("--fail %q: time %v: want within (0, 1h]", s, d)
	}
	return Fail{Kind: kind, At: d}, nil
}

// validFails checks a run's failures: in time order, each within the flow, a silent failure
// before any restore, at most one of each.
func validFails(fails []Fail, duration time.Duration) error {
	seen := map[string]time.Duration{}
	for _, f := range fails {
		if _, dup := seen[f.Kind]; dup {
			return fmt.Errorf("--fail %s given twice", f.Kind)
		}
		if f.At >= duration {
			return fmt.Errorf("--fail %v: after the flow's end (%v)", f, duration)
		}
		seen[f.Kind] = f.At
	}
	if r, ok := seen[FailR2Restore]; ok {
		s, ok := seen[FailR2Silent]
		if !ok || r <= s {
			return fmt.Errorf("--fail %s@%v needs an earlier %s", FailR2Restore, r, FailR2Silent)
		}
	}
	return nil
}

// failTable is R1's nftables table for the silent failure.
const failTable = "ilnplab_fail"

// applyFail carries out one failure in R1 and returns the CLOCK_MONOTONIC time just before the
// rules took effect. r2-silent drops what R1 forwards from or to r1-r2 (both directions in
// one nft command); r2-restore removes the table.
func (t *Topology) applyFail(f Fail) (time.Time, error) {
	switch f.Kind {
	case FailR2Silent:
		if _, err := t.R1.Run("nft", "add table inet "+failTable+" ; add chain inet "+failTable+
			" silent { type filter hook forward priority 0 ; policy accept ; }"); err != nil {
			return time.Time{}, fmt.Errorf("fail %v: %w", f, err)
		}
		at := time.Now()
		_, err := t.R1.Run("nft", "add rule inet "+failTable+" silent iifname r1-r2 drop ; add rule inet "+failTable+" silent oifname r1-r2 drop")
		if err != nil {
			return at, fmt.Errorf("fail %v: %w", f, err)
		}
		return at, nil
	case FailR2Restore:
		at := time.Now()
		if _, err := t.R1.Run("nft", "delete table inet "+failTable); err != nil {
			return at, fmt.Errorf("fail %v: %w", f, err)
		}
		return at, nil
	}
	return time.Time{}, fmt.Errorf("unknown failure %q", f.Kind)
}

// multihomeBefore runs before the daemons start: the MN comes up in L3 only, so that L2,
// learned after it, is the newest locator and the one the flow starts on whatever the policy
// (newest, or preference and quality with nothing measured yet: newest first among equals).
func (t *Topology) multihomeBefore(ctx context.Context) error {
	if _, err := t.MN.Run("ip", "link", "set", IfMNR2, "down"); err != nil {
		return err
	}
	if _, err := t.MN.Run("ip", "link", "set", IfMNR3, "up"); err != nil {
		return err
	}
	return t.waitAddress(ctx, t.MN, IfMNR3, Addr(L3, MNNID), 20*time.Second)
}

// multihomeAfter runs once the daemons are up: the MN's link to R2 comes up and stays up with
// the other for the whole run.
func (t *Topology) multihomeAfter(ctx context.Context) error {
	if _, err := t.MN.Run("ip", "link", "set", IfMNR2, "up"); err != nil {
		return err
	}
	if err := t.waitAddress(ctx, t.MN, IfMNR2, Addr(L2, MNNID), 20*time.Second); err != nil {
		return err
	}
	// The daemon formed the address; give it a moment to rank it and push it to the datapath.
	return sleepCtx(ctx, 500*time.Millisecond)
}

// FailoverMs is the time from a failure at failAt (seconds since the flow started) to the
// first CN -> MN data packet (UDP or TCP: not a liveness probe) of a flow that had come via
// L2 that arrived at the MN's capture addressed to its L3 locator, the path that did not fail;
// nil when none arrived. A flow is its protocol and ports; only the flows that came via L2 in
// the second before the failure count (under multipath other flows were on L3 all along, and
// their packets there say nothing about the failover). t0 is the flow's start on the
// capture's clock.
//
// failAt is stamped just before the nft command that makes the failure, which takes effect
// some milliseconds later (the command's start-up: 10-25 ms measured); a packet of those flows
// that still arrived via L2 after failAt proves that the failure had not taken effect when it
// was forwarded. So the failure is taken at the later of failAt and the last such delivery
// before the first via L3: still a lower bound of the failure's instant (failover_ms stays an
// upper bound), and then exactly the "after the last delivery on the failed path".
func FailoverMs(mn []pcap.Packet, t0 time.Time, cnNID, mnNID uint64, failAt float64) *float64 {
	type flow struct {
		proto      uint8
		sport, dpt uint16
	}
	l2, l3 := L2.Addr().As16(), L3.Addr().As16()
	onL2 := map[flow]bool{}
	failed := failAt
	for i := range mn {
		p := &mn[i]
		if p.Dir == pcap.DirOutgoing || p.SrcNID() != cnNID || p.DstNID() != mnNID ||
			(p.Proto != pcap.ProtoUDP && p.Proto != pcap.ProtoTCP) {
			continue
		}
		at, f := p.Time.Sub(t0).Seconds(), flow{p.Proto, p.SrcPort, p.DstPort}
		if at < failAt-1 {
			continue
		}
		switch [8]byte(p.Dst[:8]) {
		case [8]byte(l2[:8]):
			onL2[f] = true
			if at >= failAt {
				failed = max(failed, at)
			}
		case [8]byte(l3[:8]):
			if at >= failAt && onL2[f] {
				ms := (at - failed) * 1000
				return &ms
			}
		}
	}
	return nil
}

// singleLinkSeconds is how long a multipath run's single-link phase runs its traffic.
const singleLinkSeconds = 4

// singleLinkPort is the single-link phase's iperf3 port (the run's own uses 5201).
const singleLinkPort = 5202

// policySetter is a mode whose daemons switch policy at run time (`ilnpctl set policy`).
type policySetter interface {
	SetPolicy(t *Topology, policy string) error
}

// singleLinkGoodput runs, before a multipath run's flow, the same TCP traffic for
// singleLinkSeconds with both daemons on the preference policy (one locator pair: the MN's
// L2 one), returns its goodput, and puts both back on multipath.
func singleLinkGoodput(ctx context.Context, t *Topology, mode Mode, tr Traffic, dir string) (*float64, error) {
	ps, ok := mode.(policySetter)
	if !ok {
		return nil, fmt.Errorf("mode %s cannot switch policy", mode.Name())
	}
	if err := ps.SetPolicy(t, "preference"); err != nil {
		return nil, err
	}
	server, err := t.Start(t.MN, "iperf3-server-single", append(tr.ServerArgs(filepath.Join(dir, "iperf-server-single.json")),
		"-p", strconv.Itoa(singleLinkPort))...)
	if err != nil {
		return nil, err
	}
	defer server.Stop(2 * time.Second)
	if err := waitListening(ctx, t, singleLinkPort, 5*time.Second); err != nil {
		return nil, fmt.Errorf("single-link iperf3 server: %w", err)
	}
	report := filepath.Join(dir, "iperf-client-single.json")
	client, err := t.Start(t.CN, "iperf3-client-single", append(tr.ClientArgs(mode.Target(t), singleLinkSeconds*time.Second, report),
		"-p", strconv.Itoa(singleLinkPort))...)
	if err != nil {
		return nil, err
	}
	if done, _ := client.Wait((singleLinkSeconds + 10) * time.Second); !done {
		client.Stop(2 * time.Second)
		return nil, fmt.Errorf("single-link phase: iperf3 did not end")
	}
	if err := ps.SetPolicy(t, "multipath"); err != nil {
		return nil, err
	}
	return iperfGoodput(report), nil
}

// iperfGoodput is what an iperf3 TCP client's JSON report says the receiver got, all flows
// together (end.sum_received.bits_per_second); nil when it has none.
func iperfGoodput(path string) *float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var doc struct {
		End struct {
			SumReceived *struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if json.Unmarshal(b, &doc) != nil || doc.End.SumReceived == nil || doc.End.SumReceived.BitsPerSecond <= 0 {
		return nil
	}
	v := doc.End.SumReceived.BitsPerSecond
	return &v
}

// PathRates is the CN -> MN data rate at the MN's capture per locator pair (the CN's locator
// -> the MN's, as the packets carried them), bytes of upper-layer payload per second since
// the flow started: one series per pair, ordered by name, every second of the flow present.
func PathRates(mn []pcap.Packet, t0 time.Time, cnNID, mnNID uint64, duration time.Duration) []plots.Series {
	secs := int(math.Ceil(duration.Seconds()))
	bins := map[string][]float64{}
	for i := range mn {
		p := &mn[i]
		if p.Dir == pcap.DirOutgoing || p.SrcNID() != cnNID || p.DstNID() != mnNID ||
			(p.Proto != pcap.ProtoUDP && p.Proto != pcap.ProtoTCP) {
			continue
		}
		at := p.Time.Sub(t0).Seconds()
		if at < 0 || int(at) >= secs {
			continue
		}
		key := locatorText(p.Src) + " -> " + locatorText(p.Dst)
		if bins[key] == nil {
			bins[key] = make([]float64, secs)
		}
		bins[key][int(at)] += float64(p.Payload)
	}
	keys := make([]string, 0, len(bins))
	for k := range bins {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]plots.Series, 0, len(keys))
	for _, k := range keys {
		s := plots.Series{Label: k}
		for sec, v := range bins[k] {
			s.Points = append(s.Points, measure.Point{T: float64(sec) + 0.5, V: v})
		}
		out = append(out, s)
	}
	return out
}

// locatorText is an address's locator half in RFC 6742 form.
func locatorText(a [16]byte) string {
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7])
}

// pathPlot draws paths.png: the per-pair data rate of a multihomed run.
func pathPlot(cfg RunConfig, dir string, rep int, mn []pcap.Packet, t0 time.Time, failedAt []float64) error {
	policy := ", policy " + cmp.Or(cfg.Policy, "newest")
	if !NeedsILNP(cfg.Mode) {
		policy = "" // the peers have no ilnpd policy
	}
	title := fmt.Sprintf("%s %s %s%s, rep %d: rate per locator pair", cfg.Scenario, cfg.Mode, cfg.Traffic, policy, rep)
	for i, f := range slices.SortedFunc(slices.Values(cfg.Fails), func(a, b Fail) int { return cmp.Compare(a.At, b.At) }) {
		if i < len(failedAt) {
			title += fmt.Sprintf("; %s %.1f s", f.Kind, failedAt[i])
		}
	}
	series := PathRates(mn, t0, nid64(CNNID), nid64(MNNID), cfg.Profile.Duration)
	return plots.Rate(filepath.Join(dir, "paths.png"), title, series, plots.Marks{Enter: -1, Leave: -1, Handoff: -1})
}
