//go:build !linux

package testenv

import "os/exec"

func setPdeathsig(*exec.Cmd) {}
