package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"ilnp/lab"
)

// cmdFamilies is `ilnp-lab families`: every cross-family move x handoff mode x traffic as its
// own run (lab/families_matrix.go) and DIR/report.md, the table beside HIP's Tables I and II.
func cmdFamilies(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("families", flag.ExitOnError)
	var c common
	c.registerOutBin(fs)
	fs.StringVar(&c.profile, "profile", "quick", "movement timing: thesis or quick")
	fs.IntVar(&c.reps, "reps", 3, "repetitions per cell")
	fs.DurationVar(&c.duration, "duration", 0, "flow duration (overrides the profile)")
	fs.DurationVar(&c.enter, "enter", 0, "when the MN's interface to R3 comes up (overrides the profile)")
	fs.DurationVar(&c.leave, "leave", 0, "when the MN's interface to R2 goes down (overrides the profile)")
	fs.StringVar(&c.access, "access", "wlan", "shape of the MN's access links")
	families := fs.String("families", strings.Join(lab.DefaultFamiliesList, ","), "testbeds (moves), L2-L3: "+strings.Join(lab.FamilyNames, ", "))
	modes := fs.String("modes", "ilnp-soft,ilnp-hard", "handoff modes (ilnp-soft: make-before-break, ilnp-hard: break-before-make)")
	traffics := fs.String("traffics", "udp-hd,tcp", "traffic kinds")
	scenario := fs.String("scenario", "lan-lan", "scenario (HIP measured on a LAN)")
	reportOnly := fs.Bool("report-only", false, "rewrite report.md from the runs already in --out")
	_ = fs.Parse(args)
	if c.out == "" {
		return fmt.Errorf("--out is required")
	}
	prof, err := c.timing()
	if err != nil {
		return err
	}
	cfg := lab.FamiliesConfig{Modes: split(*modes), Traffics: split(*traffics), Scenario: *scenario, Profile: prof, Reps: c.reps,
		Access: c.access, Out: c.out, Progress: os.Stderr}
	for _, f := range split(*families) {
		fam, err := lab.ParseFamilies(f)
		if err != nil {
			return err
		}
		cfg.Families = append(cfg.Families, fam)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if *reportOnly {
		if err := lab.WriteFamiliesReport(cfg, nil); err != nil {
			return err
		}
		fmt.Printf("families report: %s\n", filepath.Join(c.out, "report.md"))
		return nil
	}
	if cfg.BinDir, err = c.binaries(cfg.Modes); err != nil {
		return err
	}
	start := time.Now()
	err = lab.RunFamilies(ctx, cfg)
	fmt.Printf("families report: %s (%s)\n", filepath.Join(c.out, "report.md"), time.Since(start).Round(time.Second))
	return err
}
