package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"ilnp/lab/analysis"
)

// Row ch6 of `ilnp-lab results`: thesis chapter 6's handoff delay with one signalling message
// lost (Tables 6.5-6.11, "LU or BU loss": ILNP 1007 ms to a LAN and 1202 ms to a WAN, the
// timeout plus the RTT), measured by `ilnp-lab signalling --parts delay` (one run per case:
// n = 1) beside the thesis's value and the analytic one with our inputs.

func (c ResultsConfig) ch6() (scenarios, modes []string) {
	scenarios = c.Scenarios
	cand := []string{"ilnp-hard", "ilnp-soft", "mipv6", "mipv6-ro"}
	if c.Quick {
		scenarios, cand = []string{"wan-wan"}, []string{"ilnp-soft", "mipv6"}
	}
	for _, m := range cand {
		if slices.Contains(c.Modes, m) {
			modes = append(modes, m)
		}
	}
	return scenarios, modes
}

func (c ResultsConfig) ch6Command() string {
	sc, mo := c.ch6()
	return fmt.Sprintf("ilnp-lab signalling --parts delay --scenarios %s --modes %s --mipv6-tha %v --out %s",
		strings.Join(sc, ","), strings.Join(mo, ","), c.THA, filepath.Join(c.Out, "ch6"))
}

func (c ResultsConfig) runCh6(ctx context.Context) error {
	if err := c.runCh6Success(ctx); err != nil {
		return err
	}
	scs, modes := c.ch6()
	if len(modes) == 0 || len(scs) == 0 {
		return nil
	}
	c.progress("%s", c.ch6Command())
	sc := DefaultSignalling(filepath.Join(c.Out, "ch6"), c.BinDir)
	sc.Parts, sc.Scenarios, sc.Modes, sc.THA, sc.Progress = []string{"delay"}, scs, modes, c.THA, c.Progress
	err := Signalling(ctx, sc)
	if errors.Is(err, context.Canceled) {
		return err
	}
	if err != nil {
		c.progress("  failed: %v", err)
	}
	return nil
}

// ch6Cells are the table's rows "handoff delay, LU/BU lost (SCENARIO)".
func (c ResultsConfig) ch6Cells() []ResultsCell {
	scs, modes := c.ch6()
	var res SignallingResults
	b, err := os.ReadFile(filepath.Join(c.Out, "ch6", "signalling.json"))
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	var cells []ResultsCell
	for _, sc := range scs {
		label := fmt.Sprintf("handoff delay, one LU/BU lost (%s)", sc)
		for _, mo := range modes {
			cell := ResultsCell{Row: label, Mode: mo, Command: c.ch6Command()}
			if err != nil {
				cell.Error = err.Error()
				cells = append(cells, cell)
				continue
			}
			cell.Error = "no row in signalling.json"
			for _, r := range res.Delay {
				if r.Scenario != sc || r.Mode != mo || r.Case != "update_lost" {
					continue
				}
				cell.Error = r.Error
				if r.HandoffDelayMs != nil {
					v := *r.HandoffDelayMs
					cell.Value, cell.N = &v, 1
				}
				if r.ThesisDelayMs != nil {
					cell.Source = fmt.Sprintf("thesis %.0f ms", *r.ThesisDelayMs)
					if r.OursDelayMs != nil {
						cell.Source += fmt.Sprintf(", the same expression with our inputs %.0f ms", *r.OursDelayMs)
					}
					cell.Source += fmt.Sprintf("; %d attempts", r.Attempts)
				}
			}
			cells = append(cells, cell)
		}
	}
	return cells
}

// ch6Thesis is the thesis column of the ch6 rows (Tables 6.5-6.11, "LU or BU loss").
func ch6Thesis(label string) string {
	if t := ch6SuccessThesis(label); t != "" {
		return t
	}
	for sc, v := range map[string]string{
		"lan-lan": "ILNP 1007, MIPv6 2505 / RO 2524", "lan-wan": "ILNP 1202, MIPv6 2700 / RO 3109",
		"wan-lan": "ILNP 1007, MIPv6 2700 / RO 3109", "wan-wan": "ILNP 1202, MIPv6 2900 / RO 3704",
	} {
		if label == fmt.Sprintf("handoff delay, one LU/BU lost (%s)", sc) {
			return v
		}
	}
	return ""
}

// ch6Setting is one success measurement of row ch6: a mode at loss Old on R1-R2 (the old
// path, towards the HA) and New on R1-R3 (the new path), each way (thesis §6.2.2).
type ch6Setting struct {
	Mode     string
	Old, New float64
}

// ch6Modes are the modes whose handoff success chapter 6 computes (Table 6.2 (a)-(c)).
var ch6Modes = []string{"ilnp-soft", "mipv6", "mipv6-ro"}

// ch6Losses: Table 6.2's corner (10 % / 10 %), unequal loss beyond it, and for ILNP 5 % each
// way, the overlay's 10 % round trip of Fig. 3.5 (10 % each way is its 20 %).
var ch6Losses = [][2]float64{{0.10, 0.10}, {0, 0.20}, {0.20, 0}, {0.10, 0.20}}

func (c ResultsConfig) ch6Settings() []ch6Setting {
	var out []ch6Setting
	losses := ch6Losses
	if c.Quick {
		losses = losses[:1]
	}
	for _, l := range losses {
		for _, m := range ch6Modes {
			if slices.Contains(c.Modes, m) {
				out = append(out, ch6Setting{m, l[0], l[1]})
			}
		}
	}
	if slices.Contains(c.Modes, "ilnp-soft") && !c.Quick {
		out = append(out, ch6Setting{"ilnp-soft", 0.05, 0.05})
	}
	return out
}

// dir is where `ilnp-lab results` runs the setting; ch6SuccessRows pools every
// OUT/ch6/success/*/signalling.json, so more runs of a setting (in chunks) may sit beside it.
func (s ch6Setting) dir(out string) string {
	return filepath.Join(out, "ch6", "success", fmt.Sprintf("%s-%g-%g", s.Mode, s.Old*100, s.New*100))
}

func (c ResultsConfig) ch6SuccessCommand(s ch6Setting) string {
	return fmt.Sprintf("ilnp-lab signalling --parts success --success-modes %s --loss-pairs %g/%g --handoffs %d --mipv6-tha %v --out %s",
		s.Mode, s.Old, s.New, c.Handoffs, c.THA, s.dir(c.Out))
}

func (c ResultsConfig) runCh6Success(ctx context.Context) error {
	for _, s := range c.ch6Settings() {
		c.progress("%s", c.ch6SuccessCommand(s))
		sc := DefaultSignalling(s.dir(c.Out), c.BinDir)
		sc.Parts, sc.SuccessModes, sc.Losses, sc.LossPairs = []string{"success"}, []string{s.Mode}, nil, [][2]float64{{s.Old, s.New}}
		sc.Handoffs, sc.THA, sc.Progress = c.Handoffs, c.THA, c.Progress
		err := Signalling(ctx, sc)
		if errors.Is(err, context.Canceled) {
			return err
		}
		if err != nil {
			c.progress("  failed: %v", err)
		}
	}
	return nil
}

// ch6SuccessRows pools the success rows of every run under OUT/ch6/success by mode and loss:
// exchanges, first tries, acknowledged ones and attempts add up, and the rate, its Wilson
// interval and the attempts per exchange are computed again over the pool. dirs counts the
// runs pooled into each.
func ch6SuccessRows(out string) (map[ch6Setting]SuccessRow, map[ch6Setting][]string, error) {
	files, err := filepath.Glob(filepath.Join(out, "ch6", "success", "*", "signalling.json"))
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(files)
	pooled, errs := map[ch6Setting]SuccessRow{}, map[ch6Setting][]string{}
	for _, f := range files {
		res, err := ReadSignalling(filepath.Dir(f))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, r := range res.Success {
			o, n := r.Losses()
			k := ch6Setting{r.Mode, o, n}
			if r.Error != "" {
				errs[k] = append(errs[k], r.Error)
				continue
			}
			p := pooled[k]
			p.Mode, p.Loss, p.LossOld, p.LossNew, p.Analytic = r.Mode, r.Loss, ptrF(o), ptrF(n), r.Analytic
			p.Exchanges += r.Exchanges
			p.FirstTry += r.FirstTry
			p.Eventually += r.Eventually
			p.Attempts += r.Attempts
			if p.Exchanges > 0 {
				p.Rate = float64(p.FirstTry) / float64(p.Exchanges)
				p.AttemptsPerExchange = float64(p.Attempts) / float64(p.Exchanges)
			}
			p.CILow, p.CIHigh = wilson(p.FirstTry, p.Exchanges)
			pooled[k] = p
		}
	}
	return pooled, errs, nil
}

func ch6SuccessLabel(old, new float64) string {
	return fmt.Sprintf("handoff success, first try, loss old/new %g %%/%g %%", old*100, new*100)
}

func ch6AttemptsLabel(old, new float64) string {
	return fmt.Sprintf("LUs (BUs) sent per handoff, loss old/new %g %%/%g %%", old*100, new*100)
}

// ch6SuccessCells are row ch6's success rates (Table 6.2) and LUs per handoff (Fig. 3.5).
func (c ResultsConfig) ch6SuccessCells() []ResultsCell {
	pooled, errs, err := ch6SuccessRows(c.Out)
	settings := c.ch6Settings()
	// Settings measured (or tried) beyond the configuration's (a --quick table over fuller
	// runs) show too, in the order of the full table.
	full := c
	full.Quick = false
	for _, s := range full.ch6Settings() {
		_, ok := pooled[s]
		if (ok || len(errs[s]) > 0) && !slices.Contains(settings, s) {
			settings = append(settings, s)
		}
	}
	var cells []ResultsCell
	for _, s := range settings {
		cmd := c.ch6SuccessCommand(s)
		sc := ResultsCell{Row: ch6SuccessLabel(s.Old, s.New), Mode: s.Mode, Command: cmd}
		ac := ResultsCell{Row: ch6AttemptsLabel(s.Old, s.New), Mode: s.Mode, Command: cmd}
		r, ok := pooled[s]
		switch {
		case err != nil:
			sc.Error = err.Error()
		case !ok && len(errs[s]) > 0:
			sc.Error = errs[s][0]
		case !ok || r.Exchanges == 0:
			sc.Error = "no row in " + filepath.Join(c.Out, "ch6", "success", "*", "signalling.json")
		default:
			lo, hi := r.CILow, r.CIHigh
			sc.Value, sc.Low, sc.High, sc.N = ptrF(r.Rate), &lo, &hi, r.Exchanges
			sc.Source = fmt.Sprintf("%d of %d handoffs at the first try, %d acknowledged within the run's bound; eq. %s with these losses %.3f",
				r.FirstTry, r.Exchanges, r.Eventually, ch6Eq(s.Mode), r.Analytic)
			if len(errs[s]) > 0 {
				sc.Source += fmt.Sprintf("; %d further run(s) failed and are not pooled", len(errs[s]))
			}
			ac.Value, ac.N = ptrF(r.AttemptsPerExchange), r.Exchanges
		}
		ac.Error = sc.Error
		cells = append(cells, sc)
		if s.Old == s.New {
			cells = append(cells, ac)
		}
	}
	return cells
}

func ch6Eq(mode string) string {
	switch mode {
	case "mipv6":
		return "17"
	case "mipv6-ro":
		return "18"
	}
	return "19"
}

// ch6SuccessThesis is the thesis column of a success or LUs-per-handoff row.
func ch6SuccessThesis(label string) string {
	for _, l := range append(slices.Clone(ch6Losses), [2]float64{0.05, 0.05}) {
		p := analysis.PathFromLoss(l[0], l[1])
		eqs := fmt.Sprintf("ILNP %.2f, MIPv6 %.2f, RO %.2f", p.Success(analysis.ILNPv6), p.Success(analysis.MIPv6NoRO), p.Success(analysis.MIPv6RO))
		switch label {
		case ch6SuccessLabel(l[0], l[1]):
			if l[0] <= 0.10 && l[1] <= 0.10 && l[0] > 0 && l[1] > 0 {
				return "Table 6.2: " + eqs
			}
			return "eqs. 17-19 (beyond Table 6.2's 1-10 %): " + eqs
		case ch6AttemptsLabel(l[0], l[1]):
			switch l[1] {
			case 0.05:
				return "ILNP overlay, 10 % round trip (Fig. 3.5): 1.1-1.2"
			case 0.10:
				return "ILNP overlay, 20 % round trip (Fig. 3.5): 1.2-1.4"
			}
		}
	}
	return ""
}
