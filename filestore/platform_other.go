//go:build !linux && !darwin

package filestore

import (
	"fmt"
	"io/fs"
	"os"
	"runtime"
)

// errUnsupported is returned by New on platforms without the guarantees the
// store relies on (an advisory file lock and a machine-wide monotonic clock
// with a boot ID), or where they are not implemented yet.
var errUnsupported = fmt.Errorf("file: the file backend is not supported on %s/%s (only Linux and macOS)", runtime.GOOS, runtime.GOARCH)

func machineNow() (int64, error)  { return 0, errUnsupported }
func readBootID() (string, error) { return "", errUnsupported }

type lockHandle int

func openLockFile(string, fs.FileMode, bool) (lockHandle, error) { return -1, errUnsupported }
func openFile(string, int) (*os.File, error)                     { return nil, errUnsupported }
func (lockHandle) tryLock() (bool, error)                        { return false, errUnsupported }
func (lockHandle) names(string) (bool, error)                    { return false, errUnsupported }
func (lockHandle) close()                                        {}

func bootIDMounted() bool { return false }

func outsideUID(int) (int, bool)           { return 0, false }
func fileOwner(string) (string, int, bool) { return "", 0, false }
