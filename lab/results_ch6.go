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
