package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
	"ilnp/lab/summary"
)

func TestParseUpdateDetail(t *testing.T) {
	for _, c := range []struct {
		in    string
		cause string
		set   []string
	}{
		{"ok nid=0214:4fff:fe20:ee64 l64=2001:0db8:0003:0000/10", "ok", []string{"2001:0db8:0003:0000"}},
		{"ok nid=0214:4fff:fe20:ee64 l64=2001:0db8:0003:0000/20,2001:0db8:0002:0000/10 read-first", "ok",
			[]string{"2001:0db8:0002:0000", "2001:0db8:0003:0000"}},
		{"timeout nid=x l64=2001:db8:2:0/10", "timeout", []string{"2001:0db8:0002:0000"}},
		{"refused nid=x l64=", "refused", []string{}},
		{"ok l64=zz:1:2:3/1,1:2:3/4", "ok", []string{}},
		{"", "", nil},
	} {
		cause, set := parseUpdateDetail(c.in)
		if cause != c.cause || !slices.Equal(set, c.set) {
			t.Errorf("parseUpdateDetail(%q) = %q %q, want %q %q", c.in, cause, set, c.cause, c.set)
		}
	}
}

func FuzzParseUpdateDetail(f *testing.F) {
	f.Add("ok nid=0214:4fff:fe20:ee64 l64=2001:0db8:0003:0000/20,2001:0db8:0002:0000/10 read-first")
	f.Add("timeout nid=x l64=2001:db8:2:0/10")
	f.Add("ok l64=:::/,")
	f.Fuzz(func(t *testing.T, s string) {
		_, set := parseUpdateDetail(s)
		for _, l := range set {
			if len(l) != 19 {
				t.Fatalf("locator %q not in L64() form", l)
			}
		}
	})
}

// The figures come from the first accepted update (and the first poll) after each move, not
// from failed tries or updates before it.
func TestMeasureDNS(t *testing.T) {
	l2, l3 := L64(L2), L64(L3)
	const enter, leave = int64(3e9), int64(8e9)
	ev := func(at int64, detail string, dur int64) timeline.Event {
		return timeline.Event{MonoNS: at, Kind: timeline.DNSUpdateResult, Detail: detail, Duration: dur}
	}
	events := []timeline.Event{
		ev(1e9, "ok nid=n l64="+l2+"/10", 1e6),
		{MonoNS: 3.01e9, Kind: timeline.DNSUpdateSent, Detail: "nid=n l64=" + l2 + "/10," + l3 + "/20"},
		ev(3.02e9, "timeout nid=n l64="+l2+"/10,"+l3+"/20", 1e9),
		ev(3.5e9, "ok nid=n l64="+l2+"/10,"+l3+"/20", 2e6),
		ev(8.004e9, "refused nid=n l64="+l3+"/10", 1e6),
		ev(8.010e9, "ok nid=n l64="+l3+"/10", 3e6),
	}
	changes := []DNSChange{{1.5e9, []string{l2}}, {3.52e9, []string{l2, l3}}, {8.02e9, []string{l3}}}
	m := measureDNS(events, changes, 2, enter, leave)
	near := func(v *float64, want float64) bool { return v != nil && *v > want-1e-6 && *v < want+1e-6 }
	if m.Updates != 5 || m.UpdatesOK != 3 || m.PollErrors != 2 {
		t.Errorf("updates %d ok %d poll errors %d, want 5 3 2", m.Updates, m.UpdatesOK, m.PollErrors)
	}
	if !near(m.EnterUpdateMs, 500) || !near(m.LeaveUpdateMs, 10) || !near(m.LeaveExchangeMs, 3) {
		t.Errorf("enter %v leave %v exchange %v, want 500 10 3", deref(m.EnterUpdateMs), deref(m.LeaveUpdateMs), deref(m.LeaveExchangeMs))
	}
	if !near(m.VisibleEnterMs, 520) || !near(m.VisibleLeaveMs, 20) {
		t.Errorf("visible enter %v leave %v, want 520 20", deref(m.VisibleEnterMs), deref(m.VisibleLeaveMs))
	}
	if m.L3OnlyAfter != "leave" || !near(m.L3OnlyUpdateMs, 10) || !near(m.L3OnlyExchangeMs, 3) || !near(m.L3OnlyVisibleMs, 20) {
		t.Errorf("{L3} after %q: %v (exchange %v) visible %v, want leave 10 3 20", m.L3OnlyAfter,
			deref(m.L3OnlyUpdateMs), deref(m.L3OnlyExchangeMs), deref(m.L3OnlyVisibleMs))
	}
	if m := measureDNS(events[:4], changes[:2], 0, enter, leave); m.LeaveUpdateMs != nil || m.VisibleLeaveMs != nil || m.L3OnlyUpdateMs != nil {
		t.Errorf("a leave figure without an {L3} publish: %+v", m)
	}
	// Hard handoff: {L3} replaces {L2} on entering L3, before the leave.
	hard := []timeline.Event{ev(1e9, "ok nid=n l64="+l2+"/0", 1e6), ev(3.006e9, "ok nid=n l64="+l3+"/0", 5e6)}
	m = measureDNS(hard, []DNSChange{{1.5e9, []string{l2}}, {3.004e9, []string{l3}}}, 0, enter, leave)
	if m.L3OnlyAfter != "enter" || !near(m.L3OnlyUpdateMs, 6) || !near(m.L3OnlyExchangeMs, 5) || !near(m.L3OnlyVisibleMs, 4) || m.LeaveUpdateMs != nil {
		t.Errorf("hard: {L3} after %q: %v (exchange %v) visible %v leave %v, want enter 6 5 4 nil", m.L3OnlyAfter,
			deref(m.L3OnlyUpdateMs), deref(m.L3OnlyExchangeMs), deref(m.L3OnlyVisibleMs), deref(m.LeaveUpdateMs))
	}
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}

// Quick-profile lan-lan soft handoff with DNS rendezvous: iperf3 on the CN reaches
// mn.ilnp.test through the CN's ilnpd and the lab's named, the UDP session survives the move
// without a lost datagram, and after the move named holds only L3 for the MN (dig from the
// CN, across R1) and the MN's timeline shows the {L3} publish. Everything is torn down.
func TestE2EDNSRendezvous(t *testing.T) {
	requireLab(t)
	nstest.RequireTool(t, "named", "named-checkconf", "dig")
	bin := ilnpBinaries(t)
	out := t.TempDir()
	var digAfter string
	var digErr error
	cfg := RunConfig{Scenario: "lan-lan", Mode: "ilnp-soft", Traffic: "udp-hd", Profile: Profiles["quick"], Reps: 1,
		Out: out, BinDir: bin, Rendezvous: RendezvousDNS}
	cfg.AfterFlow = func(topo *Topology, dir string) {
		digAfter, digErr = topo.CN.Run("dig", "@"+DNSServerAddr.String(), "+norecurse", "+time=1", "+tries=2", "+short", DNSMNName+".", "L64")
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{"run.json", "named.log", "ilnpd-mn.log"} {
				if b, err := os.ReadFile(filepath.Join(out, "rep-1", f)); err == nil {
					t.Logf("%s (tail):\n%s", f, lastN(string(b), 30))
				}
			}
		}
	})
	s, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := summary.Read(filepath.Join(out, "summary.json")); err != nil {
		t.Fatalf("summary.json breaks the contract: %v", err)
	}
	r := s.Runs[0]
	t.Logf("lan-lan ilnp-soft udp-hd, DNS rendezvous: %s", describe(r))
	if r.SessionSurvived == nil || !*r.SessionSurvived {
		t.Errorf("session did not survive: %s", describe(r))
	}
	if r.UDPLost == nil || *r.UDPLost != 0 {
		t.Errorf("UDP lost %s, want 0 with soft handoff", Fmt(r.Values()["udp_lost"], "udp_lost"))
	}

	// dig's presentation of the one record: "PREF 2001:db8:3:0" (any zero padding).
	lines := strings.Split(strings.TrimSpace(digAfter), "\n")
	t.Logf("dig L64 %s after the move: %q", DNSMNName, digAfter)
	if digErr != nil || len(lines) != 1 || len(strings.Fields(lines[0])) != 2 {
		t.Errorf("dig L64 after the move: %v %q, want one record", digErr, digAfter)
	} else if loc, ok := normalizeL64(strings.Fields(lines[0])[1]); !ok || loc != L64(L3) {
		t.Errorf("dig L64 after the move shows %q, want only L3 %s", digAfter, L64(L3))
	}

	meta := leftovers(t, out)
	if meta.Rendezvous != RendezvousDNS || meta.DNS == nil {
		t.Fatalf("run.json: rendezvous %q, dns %v", meta.Rendezvous, meta.DNS)
	}
	d := meta.DNS
	t.Logf("DNS: %d updates (%d ok); enter -> L3 published %v ms; leave -> {L3} published %v ms (exchange %v ms); named answers {L3} %v ms after leave",
		d.Updates, d.UpdatesOK, deref(d.EnterUpdateMs), deref(d.LeaveUpdateMs), deref(d.LeaveExchangeMs), deref(d.VisibleLeaveMs))
	if d.LeaveUpdateMs == nil || d.L3OnlyAfter != "leave" {
		t.Errorf("the MN's timeline has no accepted publish of {L3} after leaving L2 (first {L3} after %q)", d.L3OnlyAfter)
	}
	if d.VisibleLeaveMs == nil {
		t.Error("polling named never saw {L3} after leaving L2")
	}
	if !slices.Equal(d.FinalL64, []string{L64(L3)}) {
		t.Errorf("named's final L64 set %v, want [%s]", d.FinalL64, L64(L3))
	}
	report, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(report), "## DNS rendezvous") {
		t.Error("report.md has no DNS rendezvous section")
	}
	ps, _ := exec.Command("ps", "-eo", "args").Output()
	if strings.Contains(string(ps), filepath.Join(out, "rep-1")) {
		t.Errorf("processes of the run (named?) still alive:\n%s", ps)
	}
}

func lastN(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
