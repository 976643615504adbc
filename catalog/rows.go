package catalog

import (
	"encoding/csv"
	"strings"
)

// csvRows reads CSV records exactly as encoding/csv's Reader does with
// FieldsPerRecord -1, no comment character and strict quotes (the same
// records, field positions and *csv.ParseError; FuzzCSVRowsMatchEncodingCSV
// holds it to that), but from one string holding the whole file: a field
// is a substring of it unless its quotes must be undone ("" inside, or a
// line break, whose \r\n becomes \n). encoding/csv allocates a string per
// record, and reading a 1,000,000-row price file was a third that.
type csvRows struct {
	data    string
	off     int // where the next line starts
	numLine int // lines read so far: the line of the last one read
	fields  []string
	pos     []fieldPos
	buf     []byte // the current field's text when its quotes must be undone
}

// fieldPos is where a field starts: line, and column as a 1-based byte index.
type fieldPos struct{ line, col int }

func newCSVRows(data string) *csvRows { return &csvRows{data: data} }

// readLine returns the next line without its line break (nl says whether
// it had one): csv's readLine, which turns \r\n into \n and drops a \r
// that ends the file. eof is set when nothing was left to read.
func (r *csvRows) readLine() (body string, nl, eof bool) {
	r.numLine++
	rest := r.data[r.off:]
	if rest == "" {
		return "", false, true
	}
	i := strings.IndexByte(rest, '\n')
	if i < 0 {
		r.off = len(r.data)
		return strings.TrimSuffix(rest, "\r"), false, false
	}
	r.off += i + 1
	return strings.TrimSuffix(rest[:i], "\r"), true, false
}

// read returns the next record, or false at the end of the data. Its
// fields stay valid until the next call; the strings in it, for good.
func (r *csvRows) read() ([]string, bool, error) {
	var body string
	var nl bool
	for {
		var eof bool
		if body, nl, eof = r.readLine(); eof {
			return nil, false, nil
		}
		if body != "" {
			break // csv skips empty lines, and a \r alone before the end
		}
	}
	r.fields, r.pos = r.fields[:0], r.pos[:0]
	if strings.IndexByte(body, '"') >= 0 {
		return r.readQuoted(body, nl)
	}
	// The common row: no quotes, so split at the commas.
	col := 1
	for {
		i := strings.IndexByte(body, ',')
		r.pos = append(r.pos, fieldPos{r.numLine, col})
		if i < 0 {
			r.fields = append(r.fields, body)
			return r.fields, true, nil
		}
		r.fields = append(r.fields, body[:i])
		body = body[i+1:]
		col += i + 1
	}
}

// readQuoted is read for a line with a quote in it: encoding/csv's
// readRecord, step for step.
func (r *csvRows) readQuoted(line string, nl bool) ([]string, bool, error) {
	recLine := r.numLine
	pos := fieldPos{r.numLine, 1}
	fail := func(line, col int, err error) ([]string, bool, error) {
		return nil, false, &csv.ParseError{StartLine: recLine, Line: line, Column: col, Err: err}
	}
	for {
		if line == "" || line[0] != '"' {
			i := strings.IndexByte(line, ',')
			field := line
			if i >= 0 {
				field = line[:i]
			}
			if j := strings.IndexByte(field, '"'); j >= 0 {
				return fail(r.numLine, pos.col+j, csv.ErrBareQuote)
			}
			r.fields = append(r.fields, field)
			r.pos = append(r.pos, pos)
			if i < 0 {
				return r.fields, true, nil
			}
			line = line[i+1:]
			pos.col += i + 1
			continue
		}
		// A quoted field: its text is a substring of the line until a ""
		// or a line break makes it differ from the bytes; from then on it
		// is built in buf.
		start := pos
		line = line[1:]
		pos.col++
		text, copied := "", false
		keep := func(s string) {
			if !copied {
				r.buf = append(r.buf[:0], text...)
				copied = true
			}
			r.buf = append(r.buf, s...)
		}
		for {
			i := strings.IndexByte(line, '"')
			if i < 0 {
				if line == "" && !nl {
					return fail(pos.line, pos.col, csv.ErrQuote) // the file ends inside the quotes
				}
				// The field goes on past the line break.
				keep(line)
				pos.col += len(line)
				if nl {
					keep("\n")
					pos.col++
				}
				var eof bool
				if line, nl, eof = r.readLine(); !eof && (line != "" || nl) {
					pos.line++
					pos.col = 1
				}
				continue
			}
			if copied {
				r.buf = append(r.buf, line[:i]...)
			} else {
				text = line[:i]
			}
			line = line[i+1:]
			pos.col += i + 1
			if line != "" && line[0] == '"' { // "" is a quote
				keep(`"`)
				line = line[1:]
				pos.col++
				continue
			}
			if line != "" && line[0] != ',' {
				return fail(r.numLine, pos.col-1, csv.ErrQuote)
			}
			break
		}
		if copied {
			text = string(r.buf)
		}
		r.fields = append(r.fields, text)
		r.pos = append(r.pos, start)
		if line == "" {
			return r.fields, true, nil
		}
		line = line[1:] // the comma
		pos.col++
	}
}
