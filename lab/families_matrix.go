package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"ilnp/lab/summary"
)

// FamiliesConfig is `ilnp-lab families`: every move (--families values) x handoff mode x
// traffic as its own `run`, and one table beside HIP's Tables I and II over all of them.
type FamiliesConfig struct {
	Families []Families
	Modes    []string
	Traffics []string
	Scenario string
	Profile  Profile
	Reps     int
	Access   string
	Out      string
	BinDir   string
	Progress io.Writer
}

// DefaultFamiliesList is every testbed: HIP's intra-family IPv6 row comes from ipv6-ipv6.
var DefaultFamiliesList = []string{string(FamiliesIPv6IPv6), string(FamiliesIPv6IPv4NAT), string(FamiliesIPv4NATIPv6), string(FamiliesIPv4NATIPv4NAT)}

// cellConfig is the run of one cell, writing into OUT/FAMILIES/MODE/TRAFFIC.
func (c FamiliesConfig) cellConfig(f Families, mode, traffic string) RunConfig {
	return RunConfig{Scenario: c.Scenario, Mode: mode, Traffic: traffic, Profile: c.Profile, Reps: c.Reps, Access: c.Access,
		Out: filepath.Join(c.Out, string(f), mode, traffic), BinDir: c.BinDir, Progress: c.Progress, Families: f,
		Rendezvous: RendezvousHosts}
}

func (c FamiliesConfig) each(fn func(f Families, mode, traffic string) error) error {
	var errs []error
	for _, f := range c.Families {
		for _, mode := range c.Modes {
			for _, tr := range c.Traffics {
				errs = append(errs, fn(f, mode, tr))
			}
		}
	}
	return errors.Join(errs...)
}

// Validate checks every cell before any runs.
func (c FamiliesConfig) Validate() error {
	if len(c.Families) == 0 || len(c.Modes) == 0 || len(c.Traffics) == 0 {
		return fmt.Errorf("families: empty list of families, modes or traffics")
	}
	for _, f := range c.Families {
		for _, mode := range c.Modes {
			if !FamiliesModes[mode] {
				return fmt.Errorf("families: mode %s: %s", mode, familiesRefusal(mode))
			}
			for _, tr := range c.Traffics {
				cfg := c.cellConfig(f, mode, tr)
				if err := cfg.Validate(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// RunFamilies runs every cell (a failed cell is reported and the others still run) and
// writes OUT/report.md.
func RunFamilies(ctx context.Context, c FamiliesConfig) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return err
	}
	failures := map[string]string{}
	start := time.Now()
	runErr := c.each(func(f Families, mode, traffic string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		cfg := c.cellConfig(f, mode, traffic)
		if c.Progress != nil {
			fmt.Fprintf(c.Progress, "families (%s elapsed): %s %s %s\n", time.Since(start).Round(time.Second), f, mode, traffic)
		}
		if _, err := Run(ctx, cfg); err != nil {
			if errors.Is(err, context.Canceled) {
				return err
			}
			failures[cfg.Out] = err.Error()
			return fmt.Errorf("%s %s %s: %w", f, mode, traffic, err)
		}
		return nil
	})
	if errors.Is(runErr, context.Canceled) {
		return runErr
	}
	return errors.Join(runErr, WriteFamiliesReport(c, failures))
}

// WriteFamiliesReport writes OUT/report.md from the cells' summary.json files (failures: why
// a cell has none, by directory).
func WriteFamiliesReport(c FamiliesConfig, failures map[string]string) error {
	var cells []FamiliesCell
	var missing []string
	_ = c.each(func(f Families, mode, traffic string) error {
		cfg := c.cellConfig(f, mode, traffic)
		s, err := summary.Read(filepath.Join(cfg.Out, "summary.json"))
		if err != nil {
			why := failures[cfg.Out]
			if why == "" {
				why = err.Error()
			}
			missing = append(missing, fmt.Sprintf("- %s %s %s: no summary (%s)", f, mode, traffic, why))
			return nil
		}
		cells = append(cells, FamiliesCell{Families: f, Mode: mode, Command: familiesCommand(cfg) + " --out " + cfg.Out, Summary: s})
		return nil
	})
	var b strings.Builder
	fmt.Fprintf(&b, "# Cross-family handover beside HIP (seed 003, Tables I and II)\n\n")
	fmt.Fprintf(&b, "Scenario %s, MN access links %s, %s profile (enter L3 at %v, leave L2 at %v, flow %v), %d repetition(s) per cell.\n\n",
		c.Scenario, orDefault(c.Access, "wlan"), c.Profile.Name, c.Profile.Enter, c.Profile.Leave, c.Profile.Duration, c.Reps)
	b.WriteString(FamiliesTable(cells))
	if len(missing) > 0 {
		b.WriteString("\nCells without figures:\n\n" + strings.Join(missing, "\n") + "\n")
	}
	return os.WriteFile(filepath.Join(c.Out, "report.md"), []byte(b.String()), 0o644)
}
