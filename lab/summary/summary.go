// Package summary is the contract the lab writes as DIR/summary.json:
//
//	{"scenario","mode","traffic","reps","runs":[{RUN}...],"mean":{RUN},"ci95":{RUN}}
//
// with RUN = rtt_ms, handoff_delay_ms, lu_sent, udp_sent, udp_lost, udp_lost_window,
// throughput_window_bps, offered_bps, interruption_ms, tcp_bytes, tcp_retransmissions, tcp_lost,
// session_survived, tcp_recovery_ms, tcp_rto_events, tcp_window_goodput_bps (issue 15: the
// LU-ACK to the new path's steady rate within 10 %, retransmission timeouts at the TCP sender,
// new bytes delivered per second in the 5-s window), recovery_ms (issue 13, `run
// --double-jump`: the later of the CN's and the MN's moves to the first delivery on both new
// locators; files written before it may lack the key), failover_ms, aggregate_goodput_bps,
// single_link_goodput_bps, reordering_retransmissions (issue 16: multihomed runs with a silent
// path failure, multipath; likewise optional), handover_ms (issue 14, every moving run of an ILNP
// mode, the cross-family ones of `run --families` among them: the MN's first LU after entering
// L3 to the first CN -> MN data packet it received on its L3 locator, both in the MN's capture;
// likewise optional). Fields that do not apply are null. Mean and 95 % confidence half-width
// (Student t) are over the runs where a field is not null; session_survived averages to the
// fraction of runs that survived. TCP summaries also carry "congestion", the congestion control
// the runs used.
package summary

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
)

// Run is one repetition.
type Run struct {
	RTTms               *float64 `json:"rtt_ms"`
	HandoffDelayMs      *float64 `json:"handoff_delay_ms"`
	LUSent              *int     `json:"lu_sent"`
	UDPSent             *int     `json:"udp_sent"`
	UDPLost             *int     `json:"udp_lost"`
	UDPLostWindow       *int     `json:"udp_lost_window"`
	ThroughputWindowBps *float64 `json:"throughput_window_bps"`
	OfferedBps          *float64 `json:"offered_bps"`
	InterruptionMs      *float64 `json:"interruption_ms"`
	TCPBytes            *int64   `json:"tcp_bytes"`
	TCPRetransmissions  *int     `json:"tcp_retransmissions"`
	TCPLost             *int     `json:"tcp_lost"`
	SessionSurvived     *bool    `json:"session_survived"`
	TCPRecoveryMs       *float64 `json:"tcp_recovery_ms"`
	TCPRTOEvents        *int     `json:"tcp_rto_events"`
	TCPWindowGoodputBps *float64 `json:"tcp_window_goodput_bps"`
	RecoveryMs          *float64 `json:"recovery_ms"`
	// Issue 16 (ilnp-lab run --multihome): the failure (--fail r2-silent@T) to the first
	// CN -> MN delivery on the other path (null when no failure was injected); the goodput
	// of all flows together and of the same flows over one locator pair (multipath runs);
	// the TCP sender's retransmissions that the receiver reported as spurious (D-SACK: the
	// original had arrived, late, as reordering delivers it).
	FailoverMs                *float64 `json:"failover_ms"`
	AggregateGoodputBps       *float64 `json:"aggregate_goodput_bps"`
	SingleLinkGoodputBps      *float64 `json:"single_link_goodput_bps"`
	ReorderingRetransmissions *int     `json:"reordering_retransmissions"`
	// Issue 14: the HIP seed's handover duration, the MN's first Locator Update after
	// entering L3 to the first CN -> MN data packet (UDP or TCP) the MN received on its L3
	// locator, both as the MN's capture stamped them (null in modes without LUs, and in
	// multihomed and double-jump runs).
	HandoverMs *float64 `json:"handover_ms"`
	// Issue 24 (--path-mtu, --drop-exthdr): the Packet Too Big messages the CN's and the MN's
	// datapaths translated to the session view, and whether any locator pair ran ILNPv6 in UDP
	// over IPv6 (null in modes without ILNP).
	PMTUErrorsTranslated *int  `json:"pmtu_errors_translated"`
	PathEncapsulated     *bool `json:"path_encapsulated"`
}

// Agg is a mean or a confidence half-width per field (null where no run had a value, and
// for ci95 where fewer than two had).
type Agg struct {
	RTTms               *float64 `json:"rtt_ms"`
	HandoffDelayMs      *float64 `json:"handoff_delay_ms"`
	LUSent              *float64 `json:"lu_sent"`
	UDPSent             *float64 `json:"udp_sent"`
	UDPLost             *float64 `json:"udp_lost"`
	UDPLostWindow       *float64 `json:"udp_lost_window"`
	ThroughputWindowBps *float64 `json:"throughput_window_bps"`
	OfferedBps          *float64 `json:"offered_bps"`
	InterruptionMs      *float64 `json:"interruption_ms"`
	TCPBytes            *float64 `json:"tcp_bytes"`
	TCPRetransmissions  *float64 `json:"tcp_retransmissions"`
	TCPLost             *float64 `json:"tcp_lost"`
	SessionSurvived     *float64 `json:"session_survived"`
	TCPRecoveryMs       *float64 `json:"tcp_recovery_ms"`
	TCPRTOEvents        *float64 `json:"tcp_rto_events"`
	TCPWindowGoodputBps *float64 `json:"tcp_window_goodput_bps"`
	RecoveryMs          *float64 `json:"recovery_ms"`

	FailoverMs                *float64 `json:"failover_ms"`
	AggregateGoodputBps       *float64 `json:"aggregate_goodput_bps"`
	SingleLinkGoodputBps      *float64 `json:"single_link_goodput_bps"`
	ReorderingRetransmissions *float64 `json:"reordering_retransmissions"`
	HandoverMs                *float64 `json:"handover_ms"`
	PMTUErrorsTranslated      *float64 `json:"pmtu_errors_translated"`
	PathEncapsulated          *float64 `json:"path_encapsulated"`
}

// Summary is the whole file.
type Summary struct {
	Scenario string `json:"scenario"`
	Mode     string `json:"mode"`
	Traffic  string `json:"traffic"`
	Reps     int    `json:"reps"`
	Runs     []Run  `json:"runs"`
	Mean     Agg    `json:"mean"`
	CI95     Agg    `json:"ci95"`

	// Congestion is the TCP congestion control the runs used (absent for UDP traffic and in
	// summaries written before it was recorded).
	Congestion string `json:"congestion,omitempty"`
	// TCPAware is set when ilnpd ran with tcp-aware on (issue 15).
	TCPAware bool `json:"tcp_aware,omitempty"`
}

// Field describes one metric for tables.
type Field struct {
	Key   string
	Title string
	Unit  string
}

// Fields in contract order.
var Fields = []Field{
	{"rtt_ms", "RTT", "ms"},
	{"handoff_delay_ms", "Handoff delay", "ms"},
	{"lu_sent", "LUs sent", ""},
	{"udp_sent", "UDP sent", "datagrams"},
	{"udp_lost", "UDP lost", "datagrams"},
	{"udp_lost_window", "UDP lost (5-s window)", "datagrams"},
	{"throughput_window_bps", "Throughput (5-s window)", "bit/s"},
	{"offered_bps", "Offered load", "bit/s"},
	{"interruption_ms", "Interruption", "ms"},
	{"tcp_bytes", "TCP bytes", "B"},
	{"tcp_retransmissions", "TCP retransmissions", "segments"},
	{"tcp_lost", "TCP lost", "segments"},
	{"session_survived", "Session survived", "fraction"},
	{"tcp_recovery_ms", "TCP recovery", "ms"},
	{"tcp_rto_events", "TCP RTO events", ""},
	{"tcp_window_goodput_bps", "TCP goodput (5-s window)", "bit/s"},
	{"recovery_ms", "Double-jump recovery", "ms"},
	{"failover_ms", "Failover", "ms"},
	{"aggregate_goodput_bps", "Aggregate goodput", "bit/s"},
	{"single_link_goodput_bps", "Single-link goodput", "bit/s"},
	{"reordering_retransmissions", "Reordering retransmissions", "segments"},
	{"handover_ms", "Handover (first LU to data on L3)", "ms"},
	{"pmtu_errors_translated", "Packet Too Big translated", "messages"},
	{"path_encapsulated", "Encapsulated over IPv6", "fraction"},
}

// optionalKeys may be missing from files written before they existed.
var optionalKeys = map[string]bool{"recovery_ms": true, "failover_ms": true, "aggregate_goodput_bps": true,
	"single_link_goodput_bps": true, "reordering_retransmissions": true, "handover_ms": true,
	"pmtu_errors_translated": true, "path_encapsulated": true}

// Values returns a run's fields as float pointers keyed like Fields (true = 1).
func (r Run) Values() map[string]*float64 {
	f := func(p *float64) *float64 { return p }
	i := func(p *int) *float64 {
		if p == nil {
			return nil
		}
		v := float64(*p)
		return &v
	}
	m := map[string]*float64{
		"rtt_ms": f(r.RTTms), "handoff_delay_ms": f(r.HandoffDelayMs), "lu_sent": i(r.LUSent),
		"udp_sent": i(r.UDPSent), "udp_lost": i(r.UDPLost), "udp_lost_window": i(r.UDPLostWindow),
		"throughput_window_bps": f(r.ThroughputWindowBps), "offered_bps": f(r.OfferedBps),
		"interruption_ms": f(r.InterruptionMs), "tcp_retransmissions": i(r.TCPRetransmissions),
		"tcp_lost": i(r.TCPLost), "tcp_recovery_ms": f(r.TCPRecoveryMs), "tcp_rto_events": i(r.TCPRTOEvents),
		"tcp_window_goodput_bps": f(r.TCPWindowGoodputBps), "recovery_ms": f(r.RecoveryMs),
		"failover_ms": f(r.FailoverMs), "aggregate_goodput_bps": f(r.AggregateGoodputBps),
		"single_link_goodput_bps": f(r.SingleLinkGoodputBps), "reordering_retransmissions": i(r.ReorderingRetransmissions),
		"handover_ms": f(r.HandoverMs), "pmtu_errors_translated": i(r.PMTUErrorsTranslated),
	}
	m["path_encapsulated"] = nil
	if r.PathEncapsulated != nil {
		v := 0.0
		if *r.PathEncapsulated {
			v = 1
		}
		m["path_encapsulated"] = &v
	}
	if r.TCPBytes != nil {
		v := float64(*r.TCPBytes)
		m["tcp_bytes"] = &v
	} else {
		m["tcp_bytes"] = nil
	}
	if r.SessionSurvived != nil {
		v := 0.0
		if *r.SessionSurvived {
			v = 1
		}
		m["session_survived"] = &v
	} else {
		m["session_survived"] = nil
	}
	return m
}

// Get returns the field named key of an Agg.
func (a *Agg) Get(key string) *float64 { return *a.slot(key) }

func (a *Agg) slot(key string) **float64 {
	switch key {
	case "rtt_ms":
		return &a.RTTms
	case "handoff_delay_ms":
		return &a.HandoffDelayMs
	case "lu_sent":
		return &a.LUSent
	case "udp_sent":
		return &a.UDPSent
	case "udp_lost":
		return &a.UDPLost
	case "udp_lost_window":
		return &a.UDPLostWindow
	case "throughput_window_bps":
		return &a.ThroughputWindowBps
	case "offered_bps":
		return &a.OfferedBps
	case "interruption_ms":
		return &a.InterruptionMs
	case "tcp_bytes":
		return &a.TCPBytes
	case "tcp_retransmissions":
		return &a.TCPRetransmissions
	case "tcp_lost":
		return &a.TCPLost
	case "session_survived":
		return &a.SessionSurvived
	case "tcp_recovery_ms":
		return &a.TCPRecoveryMs
	case "tcp_rto_events":
		return &a.TCPRTOEvents
	case "tcp_window_goodput_bps":
		return &a.TCPWindowGoodputBps
	case "recovery_ms":
		return &a.RecoveryMs
	case "failover_ms":
		return &a.FailoverMs
	case "aggregate_goodput_bps":
		return &a.AggregateGoodputBps
	case "single_link_goodput_bps":
		return &a.SingleLinkGoodputBps
	case "reordering_retransmissions":
		return &a.ReorderingRetransmissions
	case "handover_ms":
		return &a.HandoverMs
	case "pmtu_errors_translated":
		return &a.PMTUErrorsTranslated
	case "path_encapsulated":
		return &a.PathEncapsulated
	}
	panic("summary: unknown field " + key)
}

// New aggregates runs.
func New(scenario, mode, traffic string, runs []Run) Summary {
	s := Summary{Scenario: scenario, Mode: mode, Traffic: traffic, Reps: len(runs), Runs: runs}
	if s.Runs == nil {
		s.Runs = []Run{}
	}
	for _, f := range Fields {
		var xs []float64
		for _, r := range runs {
			if v := r.Values()[f.Key]; v != nil {
				xs = append(xs, *v)
			}
		}
		mean, ci, ok := MeanCI95(xs)
		if !ok {
			continue
		}
		m := mean
		*s.Mean.slot(f.Key) = &m
		if len(xs) >= 2 {
			c := ci
			*s.CI95.slot(f.Key) = &c
		}
	}
	return s
}

// MeanCI95 returns the mean and the 95 % confidence half-width t(0.975, n-1) * s / sqrt(n).
func MeanCI95(xs []float64) (mean, half float64, ok bool) {
	n := len(xs)
	if n == 0 {
		return 0, 0, false
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(n)
	if n < 2 {
		return mean, 0, true
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(n-1))
	return mean, TQuantile975(n-1) * sd / math.Sqrt(float64(n)), true
}

// t(0.975, df) for df = 1..30; beyond, the normal 1.96 is within 2 %.
var t975 = []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// TQuantile975 is Student's t 97.5 % quantile.
func TQuantile975(df int) float64 {
	if df < 1 {
		return math.NaN()
	}
	if df <= len(t975) {
		return t975[df-1]
	}
	if df <= 60 {
		return 2.000 + (2.042-2.000)*float64(60-df)/30
	}
	return 1.96
}

// Write stores the summary as indented JSON.
func (s Summary) Write(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Read loads and validates a summary file.
func Read(path string) (Summary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Summary{}, err
	}
	if err := Validate(b); err != nil {
		return Summary{}, fmt.Errorf("%s: %w", path, err)
	}
	var s Summary
	err = json.Unmarshal(b, &s)
	return s, err
}

// Validate checks a summary.json against the contract: exactly the keys above, numbers or
// null (session_survived: boolean or null in runs), runs counted by reps.
func Validate(data []byte) error {
	var top map[string]json.RawMessage
	if err := strictUnmarshal(data, &top); err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	if raw, ok := top["congestion"]; ok {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || s == "" {
			return fmt.Errorf("summary: congestion must be a non-empty string")
		}
		delete(top, "congestion")
	}
	if raw, ok := top["tcp_aware"]; ok {
		var on bool
		if err := json.Unmarshal(raw, &on); err != nil || !on {
			return fmt.Errorf("summary: tcp_aware must be true when present")
		}
		delete(top, "tcp_aware")
	}
	if err := exactKeys("summary", top, []string{"scenario", "mode", "traffic", "reps", "runs", "mean", "ci95"}); err != nil {
		return err
	}
	for _, k := range []string{"scenario", "mode", "traffic"} {
		var s string
		if err := json.Unmarshal(top[k], &s); err != nil || s == "" {
			return fmt.Errorf("summary: %s must be a non-empty string", k)
		}
	}
	var reps int
	if err := json.Unmarshal(top["reps"], &reps); err != nil || reps < 0 {
		return fmt.Errorf("summary: reps must be a non-negative integer")
	}
	var runs []map[string]json.RawMessage
	if err := json.Unmarshal(top["runs"], &runs); err != nil || runs == nil {
		return fmt.Errorf("summary: runs must be an array of objects")
	}
	if len(runs) != reps {
		return fmt.Errorf("summary: %d runs but reps is %d", len(runs), reps)
	}
	keys := make([]string, len(Fields))
	for i, f := range Fields {
		keys[i] = f.Key
	}
	for i, r := range runs {
		where := fmt.Sprintf("runs[%d]", i)
		if err := exactKeys(where, r, keys); err != nil {
			return err
		}
		for _, k := range keys {
			if _, ok := r[k]; !ok {
				continue // optional, absent
			}
			if err := checkValue(where+"."+k, r[k], k == "session_survived" || k == "path_encapsulated"); err != nil {
				return err
			}
		}
	}
	for _, agg := range []string{"mean", "ci95"} {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(top[agg], &m); err != nil || m == nil {
			return fmt.Errorf("summary: %s must be an object", agg)
		}
		if err := exactKeys(agg, m, keys); err != nil {
			return err
		}
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				continue // optional, absent
			}
			if err := checkValue(agg+"."+k, m[k], false); err != nil {
				return err
			}
		}
	}
	return nil
}

func strictUnmarshal(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("trailing data after the object")
	}
	return nil
}

func exactKeys(where string, m map[string]json.RawMessage, want []string) error {
	wantSet := map[string]bool{}
	for _, k := range want {
		wantSet[k] = true
		if _, ok := m[k]; !ok && !optionalKeys[k] {
			return fmt.Errorf("summary: %s lacks %q", where, k)
		}
	}
	var extra []string
	for k := range m {
		if !wantSet[k] {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Errorf("summary: %s has unknown keys %v", where, extra)
	}
	return nil
}

func checkValue(where string, raw json.RawMessage, boolean bool) error {
	s := string(bytes.TrimSpace(raw))
	if s == "null" {
		return nil
	}
	if boolean {
		if s == "true" || s == "false" {
			return nil
		}
		return fmt.Errorf("summary: %s must be true, false or null, got %s", where, s)
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || math.IsNaN(f) {
		return fmt.Errorf("summary: %s must be a number or null, got %s", where, s)
	}
	return nil
}
