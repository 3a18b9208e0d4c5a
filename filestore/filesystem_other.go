//go:build !linux && !darwin

package filestore

func fileSystemOf(string) (FileSystem, error) { return FileSystem{}, errUnsupported }
