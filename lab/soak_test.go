package lab

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// Tolerances of the short soak: what may differ between the start and the end sample without
// being growth. RSS: a Go heap breathes with the collector (GOGC=100 lets it double before a
// collection), so a quarter of the start or 4 MB, whichever is more. Open files and goroutines:
// the control connection ilnpctl's sample itself makes, and one in flight. Map entries, routes
// and addresses: none.
const (
	soakRSSSlackKB   = 4096
	soakFDSlack      = 2
	soakGoroutSlack  = 3
	soakShortMoves   = 50
	soakSwitchEvery  = 10
	soakContractKeys = "acked fds_end fds_start map_entries_end map_entries_start moves rss_end_kb rss_start_kb sessions_broken udp_lost"
)

// TestSoakShort runs 50 moves L2 <-> L3 (soft and hard alternating every 10) under a TCP byte
// stream and a UDP echo flow: every move acknowledged, no session broken, no UDP datagram lost
// in soft moves, and the MN daemon's resources, map entries, routes and addresses flat within
// the tolerances above.
func TestSoakShort(t *testing.T) {
	requireLab(t)
	out := t.TempDir()
	rep, err := Soak(context.Background(), SoakConfig{Out: out, BinDir: ilnpBinaries(t), Moves: soakShortMoves, SwitchEvery: soakSwitchEvery})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d moves (soft %d, hard %d) in %.0f s; UDP lost %d of %d (soft %d, hard %d), longest gap %.0f ms\nstart: %s\nend:   %s",
		rep.Result.Moves, rep.SoftMoves, rep.HardMoves, rep.DurationSecs, rep.Result.UDPLost, rep.UDPSent,
		rep.UDPLostSoft, rep.UDPLostHard, rep.MaxUDPGapMs, rep.Start, rep.End)
	if rep.UDPLostSoft+rep.UDPLostHard != rep.Result.UDPLost {
		t.Errorf("UDP lost %d in soft and %d in hard moves, %d in all", rep.UDPLostSoft, rep.UDPLostHard, rep.Result.UDPLost)
	}
	b, err := os.ReadFile(filepath.Join(out, "soak.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if got := strings.Join(keys, " "); got != soakContractKeys {
		t.Errorf("soak.json has fields %q, the contract is %q", got, soakContractKeys)
	}
	var back SoakResult
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, rep.Result) {
		t.Errorf("soak.json = %s, want %+v (%v)", b, rep.Result, err)
	}
	r, s, e := rep.Result, rep.Start, rep.End
	if r.Moves != soakShortMoves || r.Acked != r.Moves {
		t.Errorf("%d moves, %d acknowledged: %v", r.Moves, r.Acked, rep.Unacked)
	}
	if r.SessionsBroken != 0 {
		t.Errorf("%d sessions broken (TCP: %s)", r.SessionsBroken, rep.TCPError)
	}
	// A soft move loses nothing, with one exception issue 23 brought: a locator that comes back
	// into the MN's set is verified again, and until its challenge is answered the CN sends
	// there only within its credit (rerouted to a verified locator, or dropped when the old one
	// is still being verified itself). On a loaded machine that cost a few datagrams of the
	// ~2,000 sent in soft moves (3 with the CN's dp_egress_unverified_credit moving); anything
	// beyond that, or any loss without such drops, is a defect. Since a locator that left less
	// than 30 s ago returns at full rate when its fresh LU comes from it (RFC 9000 s.9.3,
	// locverify.RecentlyVerified), this is left for a returning locator announced from elsewhere.
	if soft := rep.UDPLostSoft; soft != 0 && (rep.Drops["cn:dp_egress_unverified_credit"] == 0 || soft > 5) {
		t.Errorf("soft handoff lost %d UDP datagrams; drop counters: %v", rep.UDPLostSoft, rep.Drops)
	} else if soft != 0 {
		t.Logf("soft handoff lost %d UDP datagrams while returning locators were verified again; drop counters: %v", soft, rep.Drops)
	}
	if rep.HardMoves == 0 || rep.SoftMoves == 0 {
		t.Errorf("soft %d, hard %d moves: want both", rep.SoftMoves, rep.HardMoves)
	}
	if e.RSSKB > s.RSSKB+max(s.RSSKB/4, soakRSSSlackKB) {
		t.Errorf("ilnpd RSS grew from %d to %d KB", s.RSSKB, e.RSSKB)
	}
	if e.FDs > s.FDs+soakFDSlack {
		t.Errorf("ilnpd open files grew from %d to %d", s.FDs, e.FDs)
	}
	if e.Goroutines > s.Goroutines+soakGoroutSlack {
		t.Errorf("ilnpd goroutines grew from %d to %d", s.Goroutines, e.Goroutines)
	}
	// No growth (issue 12's contract): a start sample may still hold a moment's extra identity
	// address and its route from the warm-up move; a leak only ever adds.
	if e.MapEntries > s.MapEntries || e.Routes > s.Routes || e.Addresses > s.Addresses {
		t.Errorf("map entries %d -> %d, routes %d -> %d, addresses %d -> %d: want no growth",
			s.MapEntries, e.MapEntries, s.Routes, e.Routes, s.Addresses, e.Addresses)
	}
	// A failure says where the LU, its ACK or the flow disappeared: both timelines around the
	// first unacknowledged moves and around the longest UDP gap.
	for i, at := range rep.UnackedAtNS {
		if i == 2 {
			break
		}
		t.Logf("timelines from 0.2 s before %s:\n%s", rep.Unacked[i], SoakExcerpt(out, at-2e8, at+11e9, 150))
	}
	if rep.UDPLostSoft != 0 && rep.MaxUDPGapEndNS != 0 {
		gap := int64(rep.MaxUDPGapMs * 1e6)
		t.Logf("timelines around the longest UDP gap (%.0f ms):\n%s", rep.MaxUDPGapMs,
			SoakExcerpt(out, rep.MaxUDPGapEndNS-gap-5e8, rep.MaxUDPGapEndNS+1e8, 150))
	}
	if mounts, err := os.ReadFile("/proc/self/mounts"); err != nil || strings.Contains(string(mounts), out) {
		t.Errorf("mounts left under %s (%v)", out, err)
	}
}

// TestSoakExcerpt: the failure excerpt merges both timelines in time order, keeps only the
// window and stops at the limit.
func TestSoakExcerpt(t *testing.T) {
	dir := t.TempDir()
	write := func(node, text string) {
		if err := os.WriteFile(filepath.Join(dir, node+"-events.jsonl"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("mn", `{"t_ns":1000,"type":"lu_sent","node":"mn"}
{"t_ns":3000,"type":"lu_ack_received","node":"mn"}
{"t_ns":9000,"type":"locator_added","node":"mn"}
`)
	write("cn", `{"t_ns":2000,"type":"lu_received","node":"cn"}
{"t_ns":500,"type":"session_new","node":"cn"}
`)
	got := SoakExcerpt(dir, 1000, 3000, 10)
	var kinds []string
	for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(l[strings.Index(l, "{"):]), &ev); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		kinds = append(kinds, ev["type"].(string))
	}
	if want := []string{"lu_sent", "lu_received", "lu_ack_received"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("excerpt %q: types %v, want %v", got, kinds, want)
	}
	if got := SoakExcerpt(dir, 0, 10000, 2); !strings.HasSuffix(got, "... 3 more\n") {
		t.Errorf("limited excerpt %q: want it to end with the count left out", got)
	}
}
