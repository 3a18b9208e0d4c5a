//go:build !linux

package testenv

import "os/exec"

func setPdeathsig(*exec.Cmd) {}

func startProcess(cmd *exec.Cmd) error { return cmd.Start() }
