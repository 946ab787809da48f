package secret

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// FileMode is the mode of every file espgw writes with keys in it.
const FileMode fs.FileMode = 0o600

// WriteFile writes data, which holds keys, to path so that only its owner
// can read it, whatever was there before. A regular file (or none) is
// replaced: data goes to a new 0600 file in the same directory, which is
// then renamed over path, so an existing 0644 file does not stay
// world-readable, and no reader ever sees half a file. A symbolic link is
// followed and its target replaced. A path naming a device or a pipe
// (/dev/stdout) is written as it is, since nothing lands on a disk.
func WriteFile(path string, data []byte) error {
	return WriteFileFrom(path, func(w io.Writer) error {
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("write key file %s: %w", path, err)
		}
		return nil
	})
}

// WriteFileFrom is WriteFile of what write writes: a file is replaced
// only when write returns nil, and left as it was otherwise.
func WriteFileFrom(path string, write func(io.Writer) error) error {
	target := path
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		target = resolved
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write key file %s: %w", path, err)
	}
	fi, err := os.Stat(target)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("write key file %s: is a directory", path)
	case err == nil && !fi.Mode().IsRegular():
		f, err := os.OpenFile(target, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("write key file %s: %w", path, err)
		}
		return errors.Join(write(f), f.Close())
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("write key file %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write key file %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp makes 0600 files; Chmod makes sure whatever the umask.
	if err := tmp.Chmod(FileMode); err != nil {
		tmp.Close()
		return fmt.Errorf("write key file %s: %w", path, err)
	}
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write key file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return fmt.Errorf("write key file %s: %w", path, err)
	}
	done = true
	return nil
}
