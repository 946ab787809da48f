package bench

import "errors"

// WriteCharts is filled in below.
func WriteCharts(dir string, rep *Report) ([]string, error) { return nil, errors.New("todo") }
