// Package overwrite refuses an output file that is one of a command's
// inputs.
//
// It refuses a command's output file when it is one of the command's inputs,
// so that no command writes over what it reads.
package overwrite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// File is a file a command reads or writes, with what it is to the command
// ("the SA file", "--wireshark-sa"), for the message. A Path of "-" is
// standard input for an input and standard output for an output; an empty
// Path is no file.
type File struct {
	Role string
	Path string
}

// Check refuses, before anything is created or truncated, an output that is
// one of the inputs or another output: the same file by device and inode,
// whatever name, symbolic link or hard link reaches it (standard input and
// output included, when redirected to a file). An output or input that does
// not exist yet is no conflict, except for two outputs of the same name.
func Check(outputs []File, inputs ...File) error {
	type known struct {
		File
		fi fs.FileInfo // nil for a file that does not exist yet
	}
	var ins []known
	for _, in := range inputs {
		if fi, err := stat(in.Path, os.Stdin); err == nil && fi.Mode().IsRegular() {
			ins = append(ins, known{in, fi})
		}
	}
	var outs []known
	for _, out := range outputs {
		if out.Path == "" {
			continue
		}
		fi, err := stat(out.Path, os.Stdout)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fi = nil
		case err != nil || !fi.Mode().IsRegular():
			continue // a terminal, a pipe or a device; or the create will say what is wrong
		}
		for _, in := range ins {
			if fi != nil && os.SameFile(fi, in.fi) {
				return fmt.Errorf("output %s (%s) is %s %s: refusing to write over an input (write to another file)", name(out.Path, "standard output"), out.Role, in.Role, name(in.Path, "standard input"))
			}
		}
		for _, o := range outs {
			if fi != nil && o.fi != nil && os.SameFile(fi, o.fi) || fi == nil && o.fi == nil && sameName(out.Path, o.Path) {
				return fmt.Errorf("output %s (%s) is also output %s (%s): give each output its own file", name(out.Path, "standard output"), out.Role, name(o.Path, "standard output"), o.Role)
			}
		}
		outs = append(outs, known{out, fi})
	}
	return nil
}

// stat is os.Stat of path, or of std when path is "-".
func stat(path string, std *os.File) (fs.FileInfo, error) {
	if path == "-" {
		return std.Stat()
	}
	return os.Stat(path)
}

func sameName(a, b string) bool {
	if a == "-" || b == "-" {
		return a == b
	}
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}

// name is path quoted, or std for "-".
func name(path, std string) string {
	if path == "-" {
		return std
	}
	return fmt.Sprintf("%q", path)
}
