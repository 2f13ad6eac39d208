package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/analysis"
	"ilnp/lab/mipv6/binding"
	"ilnp/lab/sigloss"
)

// The measured half of the control-plane analysis (thesis ch. 6, issue 8): handoff success
// under link loss, handoff delay and interruption with one lost signalling message, and
// signalling overhead at scale, each beside the analytic value of lab/analysis.

// SignallingConfig is one `ilnp-lab signalling`.
type SignallingConfig struct {
	Out    string
	BinDir string
	// Parts to run: "success", "delay", "scale" (default all).
	Parts []string
	// Success: signalling exchanges per loss setting and mode (ILNP: each move is two LU
	// exchanges, new link up and old down; MIPv6: each move away is one home registration)
	// and the loss applied to both R1-R2 and R1-R3 (old and new link of §6.2.2).
	Handoffs     int
	Losses       []float64
	SuccessModes []string
	// LossPairs are further settings with unequal loss: {old, new}, the loss on R1-R2 (the
	// home link's side, the old path) and on R1-R3 (the new path) (thesis §6.2.2).
	LossPairs [][2]float64
	// Delay: scenarios and modes, with the quick movement profile and UDP HD traffic.
	Scenarios, Modes []string
	Traffic          string
	Profile          Profile
	// THA is T_HA, the extra delay added at the home agent on top of its DAD (default 0: the
	// second the thesis measured for UMIP comes from DAD, binding.DefaultDADTimeout), for the
	// MIPv6 runs of every part.
	THA time.Duration
	// Scale: N MNs x M CNs topologies.
	Scales   [][2]int
	Progress io.Writer
}

// DefaultSignalling is what `ilnp-lab signalling` runs without flags.
func DefaultSignalling(out, bin string) SignallingConfig {
	return SignallingConfig{Out: out, BinDir: bin, Parts: []string{"success", "delay", "scale"},
		Handoffs: 40, Losses: []float64{0, 0.02, 0.05, 0.10}, SuccessModes: []string{"ilnp-soft", "mipv6"},
		Scenarios: slices.Clone(ScenarioNames), Modes: []string{"ilnp-hard", "ilnp-soft", "mipv6", "mipv6-ro"},
		Traffic: "udp-hd", Profile: Profiles["quick"], THA: 0,
		Scales: [][2]int{{1, 1}, {2, 2}, {5, 5}, {10, 10}}}
}

func (c SignallingConfig) has(part string) bool {
	for _, p := range c.Parts {
		if p == part {
			return true
		}
	}
	return false
}

func (c SignallingConfig) progress(format string, a ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "signalling: "+format+"\n", a...)
	}
}

// Signalling runs the chosen parts and writes DIR/signalling-*.csv, DIR/signalling.json and
// DIR/signalling.md. A failed case is recorded and the rest still run.
func Signalling(ctx context.Context, cfg SignallingConfig) error {
	if cfg.Out == "" {
		return fmt.Errorf("--out is required")
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return err
	}
	res := newSignallingResults(cfg)
	save := func() error {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cfg.Out, "signalling.json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
		return res.write(cfg.Out)
	}
	if cfg.has("delay") {
		for _, sc := range cfg.Scenarios {
			for _, mo := range cfg.Modes {
				cases := []analysis.LossCase{analysis.NoLoss, analysis.UpdateLost, analysis.AckLost}
				if mo == "mipv6-ro" {
					cases = append(cases, analysis.ROLost)
				}
				for _, lc := range cases {
					if err := ctx.Err(); err != nil {
						return err
					}
					cfg.progress("delay %s %s %s", sc, mo, lc)
					row, err := measureDelay(ctx, cfg, sc, mo, lc)
					if err != nil {
						if errors.Is(err, context.Canceled) {
							return err
						}
						row.Error = err.Error()
						cfg.progress("  failed: %v", err)
					}
					res.Delay = append(res.Delay, row)
					if err := save(); err != nil {
						return err
					}
				}
			}
		}
		fillOurDelays(res.Delay)
	}
	if cfg.has("success") {
		modes := cfg.SuccessModes
		if len(modes) == 0 {
			modes = []string{"ilnp-soft"}
		}
		var pairs [][2]float64
		for _, loss := range cfg.Losses {
			pairs = append(pairs, [2]float64{loss, loss})
		}
		pairs = append(pairs, cfg.LossPairs...)
		for _, mode := range modes {
			for _, pair := range pairs {
				cfg.progress("success %s, %g %% loss on R1-R2 (old), %g %% on R1-R3 (new), %d handoffs", mode, pair[0]*100, pair[1]*100, cfg.Handoffs)
				row, err := measureSuccess(ctx, cfg, mode, pair[0], pair[1])
				if err != nil {
					if errors.Is(err, context.Canceled) {
						return err
					}
					row.Error = err.Error()
					cfg.progress("  failed: %v", err)
				}
				res.Success = append(res.Success, row)
				if err := save(); err != nil {
					return err
				}
			}
		}
	}
	if cfg.has("scale") {
		for _, nm := range cfg.Scales {
			if err := ctx.Err(); err != nil {
				return err
			}
			cfg.progress("scale %d MNs x %d CNs", nm[0], nm[1])
			row, err := MeasureScale(ctx, ScaleConfig{MNs: nm[0], CNs: nm[1], BinDir: cfg.BinDir,
				Dir: filepath.Join(cfg.Out, fmt.Sprintf("scale-%dx%d", nm[0], nm[1]))})
			if err != nil {
				if errors.Is(err, context.Canceled) {
					return err
				}
				row.Error = err.Error()
				cfg.progress("  failed: %v", err)
			}
			res.Scale = append(res.Scale, row)
			if err := save(); err != nil {
				return err
			}
		}
	}
	return save()
}

// newSignallingResults is the file's header: what the MIPv6 runs of each part use.
func newSignallingResults(cfg SignallingConfig) SignallingResults {
	res := SignallingResults{THAms: float64(cfg.THA) / 1e6, Profile: cfg.Profile.Name, Traffic: cfg.Traffic,
		DADTimeoutMs: float64(binding.DefaultDADTimeout) / 1e6, THAByPart: map[string]float64{}}
	for _, part := range []string{"delay", "success"} {
		if cfg.has(part) {
			res.THAByPart[part] = float64(cfg.THA) / 1e6
		}
	}
	return res
}

// SignallingResults is DIR/signalling.json.
type SignallingResults struct {
	Profile string `json:"profile"`
	Traffic string `json:"traffic"`
	// THAms is T_HA of the MIPv6 runs (every part uses the same); THAByPart says it per part
	// that ran, and each MIPv6 row repeats it.
	THAms     float64            `json:"tha_ms"`
	THAByPart map[string]float64 `json:"tha_ms_by_part,omitempty"`
	// DADTimeoutMs is the home agent's DAD wait before the first BAck of a new binding.
	DADTimeoutMs float64      `json:"mipv6_dad_timeout_ms"`
	Delay        []DelayRow   `json:"delay,omitempty"`
	Success      []SuccessRow `json:"success,omitempty"`
	Scale        []ScaleRow   `json:"scale,omitempty"`
}

// DelayRow is one measured handoff with one signalling case beside Tables 6.5-6.12.
type DelayRow struct {
	Scenario string `json:"scenario"`
	Mode     string `json:"mode"`
	Case     string `json:"case"` // analysis.LossCase slug
	Dropped  string `json:"dropped,omitempty"`
	// THAms is the T_HA this MIPv6 run used (absent for ILNP modes).
	THAms *float64 `json:"tha_ms,omitempty"`
	// DropFired is how many packets the injector dropped (want 1 in a loss case).
	DropFired *uint64 `json:"drop_fired,omitempty"`
	// Measured.
	HandoffDelayMs *float64 `json:"handoff_delay_ms"`
	InterruptionMs *float64 `json:"interruption_ms"`
	RTTms          *float64 `json:"rtt_ms"`
	Attempts       int      `json:"attempts"` // of the handoff's exchange until acked
	// RetransmitMs is the measured retransmission timeout (attempt 2 - attempt 1), or the
	// first timeout the daemon announced when nothing was retransmitted.
	RetransmitMs *float64 `json:"retransmit_ms"`
	// Analytic: the thesis's inputs (Tables 6.5-6.12) and the same expression with our
	// measured inputs (no-loss delay of this scenario/mode as the base, our timeout as Δ).
	ThesisDelayMs        *float64 `json:"thesis_delay_ms"`
	ThesisInterruptionMs *float64 `json:"thesis_interruption_ms"`
	OursDelayMs          *float64 `json:"ours_delay_ms"`
	Error                string   `json:"error,omitempty"`
}

// SuccessRow is the measured single-attempt success rate at one loss setting.
type SuccessRow struct {
	// Mode: ilnp-soft (one LU/LU-ACK exchange), mipv6 (home BU/BAck) or mipv6-ro (home
	// BU/BAck, HoTI/HoT, CoTI/CoT and the correspondent's BU/BAck: eq. 18's eight messages).
	Mode string `json:"mode"`
	// Loss is on both R1-R2 (old) and R1-R3 (new); with unequal loss it is the new path's
	// and LossOld / LossNew say both (rows written before they existed have only Loss).
	Loss    float64  `json:"loss"`
	LossOld *float64 `json:"loss_old,omitempty"`
	LossNew *float64 `json:"loss_new,omitempty"`
	// THAms is the T_HA this MIPv6 run used (absent for ILNP).
	THAms     *float64 `json:"tha_ms,omitempty"`
	Exchanges int      `json:"exchanges"`
	FirstTry  int      `json:"first_try"` // acked without a retransmission
	Rate      float64  `json:"rate"`
	CILow     float64  `json:"ci_low"` // Wilson 95 %
	CIHigh    float64  `json:"ci_high"`
	Analytic  float64  `json:"analytic"` // eq. 19 (ILNPv6) or 17 (MIPv6 no RO) on PathFromLoss(loss, loss)
	// AnalyticRetries is with the engine's retransmissions (3 attempts) for comparison with
	// Eventually (acked at all).
	Eventually      int     `json:"eventually"`
	AnalyticRetries float64 `json:"analytic_retries"`
	// Attempts is every LU (BU) sent over the exchanges, retransmissions included;
	// AttemptsPerExchange the mean (thesis 3.3's and ch. 6's LUs per handoff).
	Attempts            int     `json:"attempts"`
	AttemptsPerExchange float64 `json:"attempts_per_exchange"`
	Error               string  `json:"error,omitempty"`
}

// Losses are the row's loss on the old (R1-R2) and the new (R1-R3) path.
func (r SuccessRow) Losses() (old, new float64) {
	if r.LossOld == nil || r.LossNew == nil {
		return r.Loss, r.Loss
	}
	return *r.LossOld, *r.LossNew
}

func columnOf(mode string) (analysis.Column, bool) {
	switch mode {
	case "mipv6":
		return analysis.ColMIPNoRO, true
	case "mipv6-ro":
		return analysis.ColMIPRO, true
	case "ilnp-hard":
		return analysis.ColILNPHard, true
	case "ilnp-soft":
		return analysis.ColILNPSoft, true
	}
	return 0, false
}

func scenarioOf(name string) analysis.Scenario {
	for _, s := range analysis.Scenarios {
		if s.String() == name {
			return s
		}
	}
	return analysis.LANtoLAN
}

// DropRule is what the injector drops in R1 for a mode and loss case (nil: nothing).
func DropRule(mode string, c analysis.LossCase) (*sigloss.Rule, error) {
	ilnp := NeedsILNP(mode)
	switch c {
	case analysis.NoLoss:
		return nil, nil
	case analysis.UpdateLost:
		if ilnp {
			return &sigloss.Rule{Msg: sigloss.LU, Nth: 1}, nil
		}
		return &sigloss.Rule{Msg: sigloss.BU, Nth: 1}, nil
	case analysis.AckLost:
		if ilnp {
			return &sigloss.Rule{Msg: sigloss.LUAck, Nth: 1}, nil
		}
		return &sigloss.Rule{Msg: sigloss.BAck, Nth: 1}, nil
	case analysis.ROLost:
		if mode == "mipv6-ro" {
			// The CoT crosses R1 once, plain, CN -> MN's care-of address (eq. 35's RO packet).
			return &sigloss.Rule{Msg: sigloss.CoT, Nth: 1}, nil
		}
	}
	return nil, fmt.Errorf("loss case %s is not measured", c)
}

func measureDelay(ctx context.Context, cfg SignallingConfig, sc, mode string, lc analysis.LossCase) (DelayRow, error) {
	row := DelayRow{Scenario: sc, Mode: mode, Case: lc.Slug()}
	if col, ok := columnOf(mode); ok {
		in := analysis.ThesisInputs(scenarioOf(sc))
		if d, ok := in.HandoffDelay(col, lc); ok {
			row.ThesisDelayMs = ptrF(float64(d) / 1e6)
		}
		if d, ok := in.Interruption(col, lc); ok {
			row.ThesisInterruptionMs = ptrF(float64(d) / 1e6)
		}
	}
	rule, err := DropRule(mode, lc)
	if err != nil {
		return row, err
	}
	if rule != nil {
		row.Dropped = rule.Comment()
	}
	if strings.HasPrefix(mode, "mipv6") {
		// The mode reads T_HA when it is constructed (in Run); put the caller's back after.
		old := MIPv6HAProcessing
		MIPv6HAProcessing = cfg.THA
		defer func() { MIPv6HAProcessing = old }()
		row.THAms = ptrF(float64(cfg.THA) / 1e6)
	}
	dir := filepath.Join(cfg.Out, "delay", sc, mode, lc.Slug())
	rc := RunConfig{Scenario: sc, Mode: mode, Traffic: cfg.Traffic, Profile: cfg.Profile, Reps: 1,
		Out: dir, BinDir: cfg.BinDir, Progress: cfg.Progress}
	rc.BeforeFlow = func(_ context.Context, t *Topology, _ string) error {
		if rule == nil {
			return nil
		}
		return sigloss.Install(t.R1.Run, []sigloss.Rule{*rule})
	}
	rc.AfterFlow = func(t *Topology, _ string) {
		if rule == nil {
			return
		}
		if got, err := sigloss.Dropped(t.R1.Run); err == nil {
			n := got[rule.Comment()]
			row.DropFired = &n
		}
	}
	s, err := Run(ctx, rc)
	if err != nil {
		return row, err
	}
	if len(s.Runs) == 1 {
		r := s.Runs[0]
		row.HandoffDelayMs, row.InterruptionMs, row.RTTms = r.HandoffDelayMs, r.InterruptionMs, r.RTTms
	}
	ev, err := readTimeline(mnTimeline(filepath.Join(dir, "rep-1")))
	if err != nil {
		return row, err
	}
	row.Attempts, row.RetransmitMs = handoffAttempts(ev)
	if lc == analysis.ROLost {
		// The return-routability timer: the CoTI's second attempt, after its first.
		row.RetransmitMs = nil
		for _, e := range ev {
			if e.Kind == timeline.RRMessage && e.Attempt == 2 && e.Duration > 0 {
				row.RetransmitMs = ptrF(float64(e.Duration) / 1e6)
				break
			}
		}
	}
	if rule != nil && (row.DropFired == nil || *row.DropFired != 1) {
		return row, fmt.Errorf("the injector dropped %v packets, want 1", row.DropFired)
	}
	return row, nil
}

// mnTimeline is the MN's own event file: ilnpd's, or mip6d's (for mipv6-ro the lab also
// writes mn-events-handoff.jsonl with the home BAck renamed; the attempts are read here from
// the original).
func mnTimeline(dir string) string { return filepath.Join(dir, "mn-events.jsonl") }

func readTimeline(path string) ([]timeline.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ev, err := timeline.Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ev, nil
}

// handoffAttempts reads the MN's first signalling exchange (LU or BU to whoever answers
// first): how many attempts until the first acknowledgement, and the retransmission timeout
// (attempt 2 - attempt 1, else the timeout announced with attempt 1 as "timeout=...").
func handoffAttempts(ev []timeline.Event) (int, *float64) {
	var first, second int64
	var announced *float64
	attempts := 0
	for _, e := range ev {
		switch e.Kind {
		case timeline.LUSent, timeline.BUSent:
			if first == 0 {
				first = e.MonoNS
				announced = announcedTimeout(e.Detail)
			} else if second == 0 && e.Attempt == 2 {
				second = e.MonoNS
			}
			attempts = max(attempts, e.Attempt)
		case timeline.LUAckReceived, timeline.BAckReceived:
			if first != 0 {
				if e.Attempt > 0 {
					attempts = e.Attempt
				}
				if second != 0 {
					return attempts, ptrF(float64(second-first) / 1e6)
				}
				return attempts, announced
			}
		}
	}
	return attempts, announced
}

func announcedTimeout(detail string) *float64 {
	for _, f := range strings.Fields(detail) {
		if v, ok := strings.CutPrefix(f, "timeout="); ok {
			if d, err := time.ParseDuration(v); err == nil {
				return ptrF(float64(d) / 1e6)
			}
		}
	}
	return nil
}

// fillOurDelays puts the thesis's expression with our inputs beside each loss case: the
// measured no-loss delay of the same scenario and mode (RTT + processing, eqs. 20/24) plus
// the measured retransmission timeout (Δ_I or Δ_M, eqs. 27/29/37/39).
func fillOurDelays(rows []DelayRow) {
	for i := range rows {
		r := &rows[i]
		if r.Case == analysis.NoLoss.Slug() {
			r.OursDelayMs = r.HandoffDelayMs
			continue
		}
		for _, b := range rows {
			if b.Scenario == r.Scenario && b.Mode == r.Mode && b.Case == analysis.NoLoss.Slug() &&
				b.HandoffDelayMs != nil && r.RetransmitMs != nil {
				r.OursDelayMs = ptrF(*b.HandoffDelayMs + *r.RetransmitMs)
			}
		}
	}
}

func ptrF(v float64) *float64 { return &v }

// wilson is the Wilson score 95 % interval of k successes in n trials.
func wilson(k, n int) (lo, hi float64) {
	if n == 0 {
		return 0, 1
	}
	const z = 1.959964
	p, nf := float64(k)/float64(n), float64(n)
	den := 1 + z*z/nf
	mid := (p + z*z/(2*nf)) / den
	half := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / den
	return max(0, mid-half), min(1, mid+half)
}

// Exchange is one signalling exchange (LU and LU-ACK, or BU and BAck) read from the MN's timeline.
type Exchange struct {
	StartNS  int64
	Attempts int  // attempts sent
	Acked    bool // an accepting answer arrived (LU-ACK outcome=acked, BAck accepted)
	AckedOn  int  // the attempt count the engine reported on the ACK
}

// LUExchanges splits the MN's timeline into LU exchanges: each lu_sent with attempt 1 opens
// one, later attempts belong to it, and an lu_ack_received with outcome=acked closes it.
func LUExchanges(ev []timeline.Event) []Exchange {
	return exchanges(ev, timeline.LUSent, timeline.LUAckReceived, "outcome=acked")
}

// HomeRegistrations is LUExchanges for mip6d's timeline: the home Binding Updates sent from a
// care-of address (bu_sent, "lifetime N" with N > 0) and the accepting BAcks. Returning home
// (lifetime 0, sent on the home link) is left out: it crosses none of the links measured.
func HomeRegistrations(ev []timeline.Event) []Exchange {
	var kept []timeline.Event
	away := false
	for _, e := range ev {
		switch {
		case e.Kind == timeline.BUSent && strings.HasPrefix(e.Detail, "home registration"):
			if e.Attempt <= 1 {
				away = !strings.Contains(e.Detail, "lifetime 0s")
			}
			if away {
				kept = append(kept, e)
			}
		case e.Kind == timeline.BAckReceived && strings.HasPrefix(e.Detail, "home registration") && away:
			kept = append(kept, e)
		}
	}
	return exchanges(kept, timeline.BUSent, timeline.BAckReceived, ": accepted")
}

// ROHandoffs is HomeRegistrations for a route-optimising mip6d: one Exchange per move away,
// from its first home BU (lifetime > 0) to the return home, whose four requests are the home
// BU, HoTI, CoTI and the correspondent BU (thesis Fig. 6.3, eq. 18). Attempts counts the home
// BUs (BUs per handoff); Acked says all four were answered (home and correspondent BAck
// accepted, HoT and CoT received); AckedOn is 1 when each request went out exactly once and 2
// when any was sent again, so FirstTry is eq. 18's "every message arrived".
func ROHandoffs(ev []timeline.Event) []Exchange {
	var out []Exchange
	type count struct{ sent, answered int }
	var home, hot, cot, cn count
	away := false
	closeOut := func() {
		if len(out) == 0 {
			return
		}
		x := &out[len(out)-1]
		x.Attempts = home.sent
		x.Acked = home.answered > 0 && hot.answered > 0 && cot.answered > 0 && cn.answered > 0
		x.AckedOn = 1
		for _, c := range []count{home, hot, cot, cn} {
			if c.sent != 1 {
				x.AckedOn = 2
			}
		}
	}
	for _, e := range ev {
		switch {
		case e.Kind == timeline.BUSent && strings.HasPrefix(e.Detail, "home registration"):
			if e.Attempt <= 1 {
				was := away
				away = !strings.Contains(e.Detail, "lifetime 0s")
				if away && !was {
					out = append(out, Exchange{StartNS: e.MonoNS})
					home, hot, cot, cn = count{}, count{}, count{}, count{}
				}
			}
			if away {
				home.sent++
			}
		case !away:
		case e.Kind == timeline.BAckReceived && strings.HasPrefix(e.Detail, "home registration") && strings.Contains(e.Detail, ": accepted"):
			home.answered++
		case e.Kind == timeline.RRMessage && e.Detail == "HoTI sent":
			hot.sent++
		case e.Kind == timeline.RRMessage && e.Detail == "HoT received":
			hot.answered++
		case e.Kind == timeline.RRMessage && e.Detail == "CoTI sent":
			cot.sent++
		case e.Kind == timeline.RRMessage && e.Detail == "CoT received":
			cot.answered++
		case e.Kind == timeline.BUSent && e.Detail == "correspondent registration":
			cn.sent++
		case e.Kind == timeline.BAckReceived && e.Detail == "correspondent registration: accepted":
			cn.answered++
		}
		if away {
			closeOut()
		}
	}
	return out
}

func exchanges(ev []timeline.Event, sent, answered timeline.Kind, acked string) []Exchange {
	var out []Exchange
	for _, e := range ev {
		switch e.Kind {
		case sent:
			if e.Attempt <= 1 || len(out) == 0 {
				out = append(out, Exchange{StartNS: e.MonoNS, Attempts: 1})
				continue
			}
			x := &out[len(out)-1]
			x.Attempts = max(x.Attempts, e.Attempt)
		case answered:
			if len(out) == 0 || !strings.Contains(e.Detail, acked) {
				continue
			}
			x := &out[len(out)-1]
			if !x.Acked {
				x.Acked, x.AckedOn = true, e.Attempt
			}
		}
	}
	return out
}

// FirstTry says the exchange was acked without a retransmission.
func (x Exchange) FirstTry() bool { return x.Acked && x.Attempts == 1 && x.AckedOn <= 1 }

// measureSuccess builds a lan-lan testbed whose R1-R2 (old) and R1-R3 (new) links lose
// lossOld and lossNew of the packets each way, runs a session in mode (ilnp-soft, mipv6 or
// mipv6-ro), and moves the MN back and forth. ILNP (L2 -> L3 -> L2 ...): every move is two
// LU exchanges (new link up, old link down); with unequal loss only the exchanges of the
// moves from L2 to L3 are counted (the thesis's handoff from the HA's network to R3's).
// MIPv6 (the thesis's trigger, the home link going down): every move away is one home
// registration through both lossy links (with RO also a fresh return routability and the
// correspondent registration), and every return home a deregistration on the home link,
// which is waited for but not counted.
func measureSuccess(ctx context.Context, cfg SignallingConfig, modeName string, lossOld, lossNew float64) (row SuccessRow, err error) {
	row.Mode, row.Loss, row.LossOld, row.LossNew = modeName, lossNew, ptrF(lossOld), ptrF(lossNew)
	proto, readExchanges := analysis.ILNPv6, LUExchanges
	switch modeName {
	case "ilnp-soft":
	case "mipv6":
		proto, readExchanges = analysis.MIPv6NoRO, HomeRegistrations
		row.THAms = ptrF(float64(cfg.THA) / 1e6)
	case "mipv6-ro":
		proto, readExchanges = analysis.MIPv6RO, ROHandoffs
		row.THAms = ptrF(float64(cfg.THA) / 1e6)
	default:
		return row, fmt.Errorf("success is measured for ilnp-soft, mipv6 and mipv6-ro, not %q", modeName)
	}
	p := analysis.PathFromLoss(lossOld, lossNew)
	row.Analytic = p.Success(proto)
	row.AnalyticRetries = p.SuccessWithRetries(proto, 3)
	name := "loss-" + strconv.FormatFloat(lossNew*100, 'g', -1, 64)
	if lossOld != lossNew {
		name = "loss-" + strconv.FormatFloat(lossOld*100, 'g', -1, 64) + "-" + strconv.FormatFloat(lossNew*100, 'g', -1, 64)
	}
	dir, err := filepath.Abs(filepath.Join(cfg.Out, "success", modeName, name))
	if err != nil {
		return row, err
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return row, err
	}
	shapeOf := func(loss float64) string {
		if loss == 0 {
			return "lan"
		}
		return "loss=" + strconv.FormatFloat(loss, 'g', -1, 64)
	}
	sc := Scenario{Name: "lossy", R2Link: shapeOf(lossOld), R3Link: shapeOf(lossNew), Title: "lossy",
		Definition: fmt.Sprintf("loss %g on R1-R2, %g on R1-R3", lossOld, lossNew)}
	prof := Profiles["quick"]
	// Build checks reachability with single pings, which the lossy links may drop: retry.
	var topo *Topology
	for try := 1; ; try++ {
		topo, err = Build(ctx, TopologyConfig{Scenario: sc, Access: "lan", RAMin: prof.RAMin, RAMax: prof.RAMax, Dir: dir})
		if err == nil {
			break
		}
		if try == 5 || ctx.Err() != nil {
			return row, fmt.Errorf("testbed with %s: %w", sc.Definition, err)
		}
		cfg.progress("  testbed not ready (%v), building again", err)
	}
	old := MIPv6HAProcessing
	MIPv6HAProcessing = cfg.THA // read by the mode's constructor
	mode := Modes[modeName](ModeOptions{BinDir: cfg.BinDir, Dir: dir})
	MIPv6HAProcessing = old
	if m, ok := mode.(*mipv6Mode); ok {
		// Every handoff runs the whole return routability, as each of the thesis's did.
		m.freshHomeTest = true
	}
	defer func() {
		err = errors.Join(err, mode.Teardown(topo), topo.Close())
	}()
	if err := mode.Setup(ctx, topo); err != nil {
		return row, err
	}
	// A session to carry LUs: UDP VoIP for as long as the moves may take.
	tr := Traffics["udp-voip"]
	server, err := topo.Start(topo.MN, "iperf3-server", tr.ServerArgs(filepath.Join(dir, "iperf-server.json"))...)
	if err != nil {
		return row, err
	}
	if err := waitListening(ctx, topo, 5201, 5*time.Second); err != nil {
		return row, fmt.Errorf("iperf3 server: %w: %s", err, server.Log())
	}
	limit := time.Duration(cfg.Handoffs)*6*time.Second + 30*time.Second
	client, err := topo.Start(topo.CN, "iperf3-client", tr.ClientArgs(mode.Target(topo), limit.Round(time.Second), filepath.Join(dir, "iperf-client.json"))...)
	if err != nil {
		return row, err
	}
	defer client.Stop(2 * time.Second)
	defer server.Stop(2 * time.Second)
	mnEv, _ := mode.Timelines()
	// Wait for the session (the MN has a peer) before moving.
	time.Sleep(2 * time.Second)
	ifs := [2]string{IfMNR2, IfMNR3}
	at := 0 // index of the interface the MN is on
	exchanges := func() []Exchange {
		ev, _ := readTimeline(mnEv)
		return readExchanges(ev)
	}
	link := func(ifname, state string) error {
		_, err := topo.MN.Run("ip", "link", "set", ifname, state)
		return err
	}
	// waitAck waits until the exchanges since `before` are all closed (or gave up).
	waitAck := func(before int) error {
		// MIPv6 backs off from 1.5 s (RFC 6275 s.11.8): at 10 % loss on both links an exchange
		// fails a third of its attempts, so three in a row (1.5 + 3 + 6 s) are not rare.
		limit := 60 * time.Second
		if modeName == "mipv6-ro" {
			// Return routability backs off from 1 s to 32 s: at 10 %/20 % a HoTI/HoT round
			// fails 58 % of the time, and six in a row (1 + 2 + ... + 32 s) came in 14 handoffs.
			limit = 150 * time.Second
		}
		deadline := time.Now().Add(limit)
		for {
			xs := exchanges()
			if len(xs) > before && xs[len(xs)-1].Acked {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no acknowledged exchange within %v after exchange %d (%d exchanges)", limit, before, len(xs))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	ilnp := !strings.HasPrefix(modeName, "mipv6")
	// counted: the exchanges that count (ILNP with unequal loss: those of the moves to L3).
	var counted []Exchange
	total := func() int {
		if ilnp && lossOld != lossNew {
			return len(counted)
		}
		return len(exchanges())
	}
	if !ilnp {
		// The foreign link stays up; the home link comes and goes.
		if err := link(IfMNR3, "up"); err != nil {
			return row, err
		}
		time.Sleep(2 * prof.RAMax)
	}
	for i := 0; total() < cfg.Handoffs; i++ {
		if !ilnp {
			n := len(exchanges())
			if err := link(IfMNR2, "down"); err != nil {
				return row, err
			}
			if err := waitAck(n); err != nil {
				return row, err
			}
			if err := link(IfMNR2, "up"); err != nil {
				return row, err
			}
			if err := waitHome(ctx, mnEv, 20*time.Second); err != nil {
				return row, fmt.Errorf("move %d: %w", i+1, err)
			}
			if i%5 == 4 {
				cfg.progress("  %d moves, %d home registrations", i+1, len(exchanges()))
			}
			continue
		}
		next := 1 - at
		n := len(exchanges())
		first := n
		if err := link(ifs[next], "up"); err != nil {
			return row, err
		}
		if err := waitAck(n); err != nil {
			return row, err
		}
		n = len(exchanges())
		if err := link(ifs[at], "down"); err != nil {
			return row, err
		}
		if err := waitAck(n); err != nil {
			return row, err
		}
		if ifs[next] == IfMNR3 {
			counted = append(counted, exchanges()[first:]...)
		}
		at = next
		if i%5 == 4 {
			cfg.progress("  %d moves, %d LU exchanges", i+1, len(exchanges()))
		}
	}
	all := exchanges()
	if ilnp && lossOld != lossNew {
		all = counted
	}
	for _, x := range all {
		row.Exchanges++
		if x.FirstTry() {
			row.FirstTry++
		}
		if x.Acked {
			row.Eventually++
		}
		row.Attempts += x.Attempts
	}
	if row.Exchanges > 0 {
		row.Rate = float64(row.FirstTry) / float64(row.Exchanges)
		row.AttemptsPerExchange = float64(row.Attempts) / float64(row.Exchanges)
	}
	row.CILow, row.CIHigh = wilson(row.FirstTry, row.Exchanges)
	return row, nil
}

// waitHome waits until mip6d's newest home-registration exchange is an accepted
// deregistration (lifetime 0): the MN is home again and the HA has let go of its binding.
func waitHome(ctx context.Context, timelinePath string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ev, _ := readTimeline(timelinePath)
		dereg, home := false, false
		for _, e := range ev {
			switch {
			case e.Kind == timeline.BUSent && e.Attempt <= 1 && strings.HasPrefix(e.Detail, "home registration"):
				dereg, home = strings.Contains(e.Detail, "lifetime 0s"), false
			case e.Kind == timeline.BAckReceived && dereg && strings.Contains(e.Detail, ": accepted"):
				home = true
			}
		}
		if home {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not deregistered at home within %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ReadSignalling reads DIR/signalling.json.
func ReadSignalling(dir string) (SignallingResults, error) {
	var r SignallingResults
	b, err := os.ReadFile(filepath.Join(dir, "signalling.json"))
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(b, &r)
}
