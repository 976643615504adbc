package cuda

// A small, strict PTX interpreter for the subset kernels.ptx uses. No GPU or
// ptxas runs here, so this is what checks the kernels' text: every register
// declared and of the instruction's size, every label resolved, aligned
// and in-bounds memory access, and the arithmetic run thread by thread
// against the Go reference. It is not ptxas: syntax ptxas alone rejects
// still needs a real driver (the gpu-tagged tests).

import (
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

type simOpKind int

const (
	simReg simOpKind = iota
	simSreg
	simImm
	simMemOp
	simVec
	simLabel
)

type simOperand struct {
	kind simOpKind
	text string
	reg  int   // simReg; simMemOp base register, or -1 for a parameter
	regs []int // simVec
	imm  uint64
}

type simInst struct {
	text    string
	pred    int // register slot of the guard predicate, or -1
	predNeg bool
	op      string
	mods    []string
	args    []simOperand
	target  int // bra: instruction index
}

type simParam struct {
	name, typ string
}

type simKernel struct {
	name     string
	params   []simParam
	class    []string // per register slot: pred, b32, b64, f32
	regIndex map[string]int
	insts    []simInst
	labels   map[string]int
	markers  map[string]int    // "pattern:begin" → instruction index
	notes    map[string]string // marker → its comment text
}

var (
	simEntryRE = regexp.MustCompile(`\.visible\s+\.entry\s+(\w+)\s*\(([^)]*)\)\s*\{`)
	simLabelRE = regexp.MustCompile(`^([A-Za-z_$][\w$]*)\s*:\s*`)
	simRegRE   = regexp.MustCompile(`^\.reg\s+\.(\w+)\s+(%[A-Za-z]+)<(\d+)>$`)
	simSregs   = map[string]bool{"%tid.x": true, "%ntid.x": true, "%ctaid.x": true, "%nctaid.x": true}
)

// parsePTX parses every entry of a module; comments that start with
// "pattern:" become markers at the position of the next instruction.
func parsePTX(src string) (map[string]*simKernel, error) {
	var clean strings.Builder
	for _, line := range strings.Split(src, "\n") {
		code, comment, _ := strings.Cut(line, "//")
		clean.WriteString(code)
		if c := strings.TrimSpace(comment); strings.HasPrefix(c, "pattern:") {
			clean.WriteString(" @@" + strings.ReplaceAll(c, ";", ",") + ";")
		}
		clean.WriteByte('\n')
	}
	text := clean.String()
	kernels := map[string]*simKernel{}
	for _, m := range simEntryRE.FindAllStringSubmatchIndex(text, -1) {
		name := text[m[2]:m[3]]
		k := &simKernel{name: name, regIndex: map[string]int{}, labels: map[string]int{},
			markers: map[string]int{}, notes: map[string]string{}}
		for _, p := range strings.Split(text[m[4]:m[5]], ",") {
			f := strings.Fields(p)
			if len(f) != 3 || f[0] != ".param" {
				return nil, fmt.Errorf("%s: bad parameter %q", name, p)
			}
			k.params = append(k.params, simParam{name: f[2], typ: strings.TrimPrefix(f[1], ".")})
		}
		depth, end := 1, -1
		for i := m[1]; i < len(text) && end < 0; i++ {
			switch text[i] {
			case '{':
				depth++
			case '}':
				depth--
				if depth == 0 {
					end = i
				}
			}
		}
		if end < 0 {
			return nil, fmt.Errorf("%s: body not closed", name)
		}
		if err := k.parseBody(text[m[1]:end]); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		kernels[name] = k
	}
	return kernels, nil
}

func (k *simKernel) parseBody(body string) error {
	for _, stmt := range strings.Split(body, ";") {
		stmt = strings.TrimSpace(stmt)
		for {
			m := simLabelRE.FindStringSubmatch(stmt)
			if m == nil {
				break
			}
			if _, dup := k.labels[m[1]]; dup {
				return fmt.Errorf("label %s defined twice", m[1])
			}
			k.labels[m[1]] = len(k.insts)
			stmt = stmt[len(m[0]):]
		}
		switch {
		case stmt == "":
		case strings.HasPrefix(stmt, "@@"):
			note := strings.TrimPrefix(stmt, "@@")
			key, _, _ := strings.Cut(note, " ")
			k.markers[key] = len(k.insts)
			k.notes[key] = note
		case strings.HasPrefix(stmt, ".reg"):
			m := simRegRE.FindStringSubmatch(strings.Join(strings.Fields(stmt), " "))
			if m == nil {
				return fmt.Errorf("bad declaration %q", stmt)
			}
			n, _ := strconv.Atoi(m[3])
			for i := range n {
				name := fmt.Sprintf("%s%d", m[2], i)
				if _, dup := k.regIndex[name]; dup {
					return fmt.Errorf("register %s declared twice", name)
				}
				k.regIndex[name] = len(k.class)
				k.class = append(k.class, m[1])
			}
		default:
			in, err := k.parseInst(stmt)
			if err != nil {
				return fmt.Errorf("%q: %w", stmt, err)
			}
			k.insts = append(k.insts, in)
		}
	}
	for i := range k.insts {
		in := &k.insts[i]
		if in.op != "bra" {
			continue
		}
		t, ok := k.labels[in.args[0].text]
		if !ok {
			return fmt.Errorf("%q: no label %s", in.text, in.args[0].text)
		}
		in.target = t
	}
	return nil
}

func (k *simKernel) parseInst(stmt string) (simInst, error) {
	in := simInst{text: stmt, pred: -1}
	if strings.HasPrefix(stmt, "@") {
		guard, rest := cutSpace(stmt)
		guard = strings.TrimPrefix(guard, "@")
		if strings.HasPrefix(guard, "!") {
			in.predNeg = true
			guard = guard[1:]
		}
		slot, ok := k.regIndex[guard]
		if !ok || k.class[slot] != "pred" {
			return in, fmt.Errorf("guard %s is not a declared predicate", guard)
		}
		in.pred = slot
		stmt = strings.TrimSpace(rest)
	}
	opcode, rest := cutSpace(stmt)
	parts := strings.Split(opcode, ".")
	in.op, in.mods = parts[0], parts[1:]
	for _, a := range splitOperands(rest) {
		op, err := k.parseOperand(a, in.op == "bra")
		if err != nil {
			return in, err
		}
		in.args = append(in.args, op)
	}
	return in, k.typecheck(&in)
}

// cutSpace splits s at its first blank.
func cutSpace(s string) (string, string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i+1:])
}

// splitOperands splits on commas outside braces and brackets.
func splitOperands(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if last := strings.TrimSpace(s[start:]); last != "" {
		out = append(out, last)
	}
	return out
}

func (k *simKernel) parseOperand(a string, label bool) (simOperand, error) {
	op := simOperand{text: a}
	switch {
	case label:
		op.kind = simLabel
	case strings.HasPrefix(a, "{"):
		op.kind = simVec
		for _, r := range strings.Split(strings.Trim(a, "{}"), ",") {
			slot, ok := k.regIndex[strings.TrimSpace(r)]
			if !ok {
				return op, fmt.Errorf("undeclared register %q", r)
			}
			op.regs = append(op.regs, slot)
		}
	case strings.HasPrefix(a, "["):
		op.kind = simMemOp
		inner := strings.TrimSpace(strings.Trim(a, "[]"))
		op.text = inner
		op.reg = -1
		if strings.HasPrefix(inner, "%") {
			slot, ok := k.regIndex[inner]
			if !ok {
				return op, fmt.Errorf("undeclared register %q", inner)
			}
			op.reg = slot
		} else if !k.hasParam(inner) {
			return op, fmt.Errorf("no parameter %q", inner)
		}
	case simSregs[a]:
		op.kind = simSreg
	case strings.HasPrefix(a, "%"):
		slot, ok := k.regIndex[a]
		if !ok {
			return op, fmt.Errorf("undeclared register %q", a)
		}
		op.kind, op.reg = simReg, slot
	case strings.HasPrefix(a, "0f"):
		v, err := strconv.ParseUint(a[2:], 16, 32)
		if err != nil || len(a) != 10 {
			return op, fmt.Errorf("bad float literal %q", a)
		}
		op.kind, op.imm = simImm, v
	case strings.HasPrefix(a, "0x") || strings.HasPrefix(a, "0X"):
		v, err := strconv.ParseUint(a[2:], 16, 64)
		if err != nil {
			return op, fmt.Errorf("bad literal %q", a)
		}
		op.kind, op.imm = simImm, v
	default:
		v, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			return op, fmt.Errorf("bad operand %q", a)
		}
		op.kind, op.imm = simImm, uint64(v)
	}
	return op, nil
}

func (k *simKernel) hasParam(name string) bool {
	for _, p := range k.params {
		if p.name == name {
			return true
		}
	}
	return false
}

func (k *simKernel) param(name string) (int, simParam) {
	for i, p := range k.params {
		if p.name == name {
			return i, p
		}
	}
	return -1, simParam{}
}

func typeBits(t string) int {
	switch t {
	case "pred":
		return 1
	case "u32", "s32", "b32", "f32":
		return 32
	case "u64", "s64", "b64":
		return 64
	}
	return 0
}

// compatible follows PTX's operand rules for what this module uses: sizes
// match, and float registers only meet float or untyped instructions.
func compatible(class, typ string) bool {
	switch {
	case typ == "pred" || class == "pred":
		return typ == class
	case typeBits(class) != typeBits(typ):
		return false
	case class == "f32":
		return typ == "f32" || typ == "b32"
	case typ == "f32":
		return class == "f32" || class == "b32"
	}
	return true
}

// typecheck checks operand counts and register sizes per instruction.
func (k *simKernel) typecheck(in *simInst) error {
	last := ""
	if len(in.mods) > 0 {
		last = in.mods[len(in.mods)-1]
	}
	want := func(i int, typ string, imm bool) error {
		if i >= len(in.args) {
			return fmt.Errorf("operand %d missing", i)
		}
		a := in.args[i]
		switch a.kind {
		case simReg:
			if !compatible(k.class[a.reg], typ) {
				return fmt.Errorf("operand %d: %s register for a .%s operand", i, k.class[a.reg], typ)
			}
		case simImm:
			if !imm {
				return fmt.Errorf("operand %d: immediate not allowed", i)
			}
		case simSreg:
			if typ != "u32" {
				return fmt.Errorf("operand %d: special register needs .u32", i)
			}
		case simVec:
			for _, r := range a.regs {
				if !compatible(k.class[r], typ) {
					return fmt.Errorf("operand %d: %s register in a .%s vector", i, k.class[r], typ)
				}
			}
		case simMemOp:
			if a.reg >= 0 && k.class[a.reg] != "b64" {
				return fmt.Errorf("operand %d: address needs a 64-bit register", i)
			}
		default:
			return fmt.Errorf("operand %d: unexpected %q", i, a.text)
		}
		return nil
	}
	nargs := func(n int) error {
		if len(in.args) != n {
			return fmt.Errorf("%s takes %d operands, has %d", in.op, n, len(in.args))
		}
		return nil
	}
	all := func(n int, typ string, fromImm int) error {
		if err := nargs(n); err != nil {
			return err
		}
		for i := range n {
			if err := want(i, typ, i >= fromImm); err != nil {
				return err
			}
		}
		return nil
	}
	mods := strings.Join(in.mods, ".")
	switch in.op {
	case "ret":
		return nargs(0)
	case "bra":
		if mods != "" && mods != "uni" {
			return fmt.Errorf("bra.%s", mods)
		}
		return nargs(1)
	case "ld", "st":
		if err := nargs(2); err != nil {
			return err
		}
		val, addr := 0, 1
		if in.op == "st" {
			val, addr = 1, 0
		}
		if in.args[addr].kind != simMemOp {
			return fmt.Errorf("%s needs an address", in.op)
		}
		switch mods {
		case "param.u64", "param.u32":
			_, p := k.param(in.args[addr].text)
			if in.op != "ld" || in.args[addr].reg >= 0 || p.typ != last {
				return fmt.Errorf("ld.param must read a .%s parameter by name", last)
			}
		case "global.u32", "global.f32", "global.u64":
		case "global.v4.u32":
			if in.args[val].kind != simVec || len(in.args[val].regs) != 4 {
				return fmt.Errorf("v4 needs four registers")
			}
		default:
			return fmt.Errorf("unsupported %s.%s", in.op, mods)
		}
		if in.args[addr].reg < 0 && mods != "param.u64" && mods != "param.u32" {
			return fmt.Errorf("global access needs a register address")
		}
		if err := want(addr, "b64", false); err != nil {
			return err
		}
		return want(val, last, false)
	case "cvta":
		if mods != "to.global.u64" {
			return fmt.Errorf("unsupported cvta.%s", mods)
		}
		return all(2, "u64", 2)
	case "cvt":
		switch mods {
		case "u32.u64", "u64.u32", "rn.f32.u32":
		default:
			return fmt.Errorf("unsupported cvt.%s", mods)
		}
		if err := nargs(2); err != nil {
			return err
		}
		if err := want(0, in.mods[len(in.mods)-2], false); err != nil {
			return err
		}
		return want(1, last, false)
	case "mov":
		if err := nargs(2); err != nil {
			return err
		}
		if err := want(0, last, false); err != nil {
			return err
		}
		return want(1, last, true)
	case "mul":
		switch mods {
		case "wide.u32":
			if err := nargs(3); err != nil {
				return err
			}
			if err := want(0, "u64", false); err != nil {
				return err
			}
			if err := want(1, "u32", false); err != nil {
				return err
			}
			return want(2, "u32", true)
		case "lo.s32", "lo.u32", "rn.f32":
			return all(3, last, 2)
		}
		return fmt.Errorf("unsupported mul.%s", mods)
	case "add", "sub", "xor", "and", "min":
		switch mods {
		case "s32", "u32", "s64", "u64", "b32", "rn.f32":
		default:
			return fmt.Errorf("unsupported %s.%s", in.op, mods)
		}
		if in.op == "min" && mods != "u64" {
			return fmt.Errorf("unsupported min.%s", mods)
		}
		if (in.op == "xor" || in.op == "and") && mods != "b32" {
			return fmt.Errorf("unsupported %s.%s", in.op, mods)
		}
		return all(3, last, 2)
	case "shl", "shr":
		switch mods {
		case "b64", "u64", "u32", "b32":
		default:
			return fmt.Errorf("unsupported %s.%s", in.op, mods)
		}
		if err := nargs(3); err != nil {
			return err
		}
		if err := want(0, last, false); err != nil {
			return err
		}
		if err := want(1, last, false); err != nil {
			return err
		}
		return want(2, "u32", true)
	case "setp":
		if len(in.mods) != 2 {
			return fmt.Errorf("setp needs a comparison and a type")
		}
		switch in.mods[0] {
		case "eq", "ne", "lt", "le", "gt", "ge":
		default:
			return fmt.Errorf("unsupported setp.%s", mods)
		}
		if err := nargs(3); err != nil {
			return err
		}
		if err := want(0, "pred", false); err != nil {
			return err
		}
		if err := want(1, last, false); err != nil {
			return err
		}
		return want(2, last, true)
	case "atom":
		if mods != "global.add.u64" && mods != "global.min.u64" {
			return fmt.Errorf("unsupported atom.%s", mods)
		}
		if err := nargs(3); err != nil {
			return err
		}
		if err := want(0, "u64", false); err != nil {
			return err
		}
		if in.args[1].kind != simMemOp || in.args[1].reg < 0 {
			return fmt.Errorf("atom needs a register address")
		}
		return want(2, "u64", true)
	case "fma":
		if mods != "rn.f32" {
			return fmt.Errorf("unsupported fma.%s", mods)
		}
		return all(4, "f32", 4)
	}
	return fmt.Errorf("unsupported instruction %s", in.op)
}

// simMemory is global memory: one arena at a non-zero base so that address
// arithmetic is exercised, with bounds and alignment checked on every access.
type simMemory struct {
	base uint64
	data []byte
}

func newSimMemory() *simMemory { return &simMemory{base: 0x7f0000000000} }

// alloc reserves n bytes, 256-byte aligned like cuMemAlloc, filled with
// 0xA5 so that stray or missing writes show.
func (m *simMemory) alloc(n int) uint64 {
	for len(m.data)%256 != 0 {
		m.data = append(m.data, 0xA5)
	}
	addr := m.base + uint64(len(m.data))
	for range n {
		m.data = append(m.data, 0xA5)
	}
	return addr
}

func (m *simMemory) slice(addr uint64, size int) ([]byte, error) {
	if addr%uint64(size) != 0 {
		return nil, fmt.Errorf("misaligned %d-byte access at %#x", size, addr)
	}
	off := addr - m.base
	if addr < m.base || off+uint64(size) > uint64(len(m.data)) {
		return nil, fmt.Errorf("%d-byte access at %#x is outside memory", size, addr)
	}
	return m.data[off : off+uint64(size)], nil
}

func (m *simMemory) u32(addr uint64) uint32 {
	b, err := m.slice(addr, 4)
	if err != nil {
		panic(err)
	}
	return binary.LittleEndian.Uint32(b)
}

func (m *simMemory) setU32(addr uint64, v uint32) {
	b, err := m.slice(addr, 4)
	if err != nil {
		panic(err)
	}
	binary.LittleEndian.PutUint32(b, v)
}

func (m *simMemory) u64(addr uint64) uint64 {
	b, err := m.slice(addr, 8)
	if err != nil {
		panic(err)
	}
	return binary.LittleEndian.Uint64(b)
}

func (m *simMemory) setU64(addr uint64, v uint64) {
	b, err := m.slice(addr, 8)
	if err != nil {
		panic(err)
	}
	binary.LittleEndian.PutUint64(b, v)
}

type simThread struct {
	k                *simKernel
	mem              *simMemory
	args             []uint64
	regs             []uint64
	tid, ntid, ctaid uint32
	nctaid           uint32
	steps, maxSteps  int
	straightLine     bool
	from, to         int
	returned         bool
}

// launch runs every thread of a grid to completion, one after another:
// the kernels share nothing but atomics, so any order is a valid one.
func (k *simKernel) launch(mem *simMemory, grid, block uint32, args ...uint64) error {
	if len(args) != len(k.params) {
		return fmt.Errorf("%s takes %d arguments, got %d", k.name, len(k.params), len(args))
	}
	for i, p := range k.params {
		if p.typ == "u32" && args[i] > math.MaxUint32 {
			return fmt.Errorf("%s: argument %d does not fit .u32", k.name, i)
		}
	}
	for b := range grid {
		for t := range block {
			th := &simThread{k: k, mem: mem, args: args, regs: make([]uint64, len(k.class)),
				tid: t, ntid: block, ctaid: b, nctaid: grid, maxSteps: 10_000_000, to: len(k.insts)}
			if err := th.run(); err != nil {
				return fmt.Errorf("%s block %d thread %d: %w", k.name, b, t, err)
			}
		}
	}
	return nil
}

// runRange runs instructions [from, to) once, straight-line, from the
// given register values, and returns the registers after.
func (k *simKernel) runRange(from, to int, in map[string]uint64) (map[string]uint64, error) {
	th := &simThread{k: k, regs: make([]uint64, len(k.class)), maxSteps: to - from,
		straightLine: true, from: from, to: to}
	for name, v := range in {
		slot, ok := k.regIndex[name]
		if !ok {
			return nil, fmt.Errorf("no register %s", name)
		}
		th.regs[slot] = v
	}
	if err := th.run(); err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for name, slot := range k.regIndex {
		out[name] = th.regs[slot]
	}
	return out, nil
}

func mask(v uint64, bits int) uint64 {
	if bits >= 64 {
		return v
	}
	return v & (1<<uint(bits) - 1)
}

func f32(v uint64) float32    { return math.Float32frombits(uint32(v)) }
func bitsOf(f float32) uint64 { return uint64(math.Float32bits(f)) }

func (th *simThread) value(a simOperand, bits int) uint64 {
	switch a.kind {
	case simReg:
		return mask(th.regs[a.reg], bits)
	case simImm:
		return mask(a.imm, bits)
	case simSreg:
		switch a.text {
		case "%tid.x":
			return uint64(th.tid)
		case "%ntid.x":
			return uint64(th.ntid)
		case "%ctaid.x":
			return uint64(th.ctaid)
		case "%nctaid.x":
			return uint64(th.nctaid)
		}
	}
	panic(fmt.Sprintf("no value for %q", a.text))
}

func (th *simThread) run() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	pc := th.from
	for pc < th.to && !th.returned {
		th.steps++
		if th.steps > th.maxSteps {
			return fmt.Errorf("no ret after %d steps", th.maxSteps)
		}
		in := &th.k.insts[pc]
		pc++
		if in.pred >= 0 && (th.regs[in.pred] != 0) == in.predNeg {
			continue
		}
		if next, jumped := th.exec(in); jumped {
			if th.straightLine {
				return fmt.Errorf("%q branches inside a straight-line range", in.text)
			}
			pc = next
		}
	}
	return nil
}

// exec runs one instruction; it returns the branch target when it jumps.
func (th *simThread) exec(in *simInst) (int, bool) {
	typ := ""
	if len(in.mods) > 0 {
		typ = in.mods[len(in.mods)-1]
	}
	bits := typeBits(typ)
	a := in.args
	set := func(v uint64) { th.regs[a[0].reg] = mask(v, bits) }
	src := func(i int) uint64 { return th.value(a[i], bits) }
	switch in.op {
	case "ret":
		th.returned = true
	case "bra":
		return in.target, true
	case "ld":
		if in.mods[0] == "param" {
			i, _ := th.k.param(a[1].text)
			set(th.args[i])
			break
		}
		addr := th.regs[a[1].reg]
		if in.mods[1] == "v4" {
			if addr%16 != 0 {
				panic(fmt.Sprintf("misaligned v4 load at %#x", addr))
			}
			for j, r := range a[0].regs {
				th.regs[r] = uint64(th.mem.u32(addr + uint64(4*j)))
			}
			break
		}
		if typ == "u64" {
			set(th.mem.u64(addr))
			break
		}
		set(uint64(th.mem.u32(addr)))
	case "st":
		addr := th.regs[a[0].reg]
		if in.mods[1] == "v4" {
			if addr%16 != 0 {
				panic(fmt.Sprintf("misaligned v4 store at %#x", addr))
			}
			for j, r := range a[1].regs {
				th.mem.setU32(addr+uint64(4*j), uint32(th.regs[r]))
			}
			break
		}
		if typ == "u64" {
			th.mem.setU64(addr, th.value(a[1], 64))
			break
		}
		th.mem.setU32(addr, uint32(th.value(a[1], 32)))
	case "cvta", "mov":
		set(src(1))
	case "cvt":
		from := in.mods[len(in.mods)-1]
		to := in.mods[len(in.mods)-2]
		v := th.value(a[1], typeBits(from))
		if to == "f32" {
			th.regs[a[0].reg] = bitsOf(float32(uint32(v)))
		} else {
			th.regs[a[0].reg] = mask(v, typeBits(to))
		}
	case "mul":
		switch in.mods[0] {
		case "wide":
			th.regs[a[0].reg] = th.value(a[1], 32) * th.value(a[2], 32)
		case "lo":
			set(src(1) * src(2))
		case "rn":
			set(bitsOf(float32(f32(src(1)) * f32(src(2)))))
		}
	case "add":
		if typ == "f32" {
			set(bitsOf(float32(f32(src(1)) + f32(src(2)))))
		} else {
			set(src(1) + src(2))
		}
	case "sub":
		set(src(1) - src(2))
	case "xor":
		set(src(1) ^ src(2))
	case "and":
		set(src(1) & src(2))
	case "min":
		set(min(src(1), src(2)))
	case "shl", "shr":
		n := th.value(a[2], 32)
		v := src(1)
		switch {
		case n >= uint64(bits):
			v = 0
		case in.op == "shl":
			v <<= n
		default:
			v >>= n
		}
		set(v)
	case "setp":
		x, y := src(1), src(2)
		var lt, eq bool
		if typ[0] == 's' {
			sx, sy := int64(x<<(64-bits))>>(64-bits), int64(y<<(64-bits))>>(64-bits)
			lt, eq = sx < sy, sx == sy
		} else {
			lt, eq = x < y, x == y
		}
		var p bool
		switch in.mods[0] {
		case "eq":
			p = eq
		case "ne":
			p = !eq
		case "lt":
			p = lt
		case "le":
			p = lt || eq
		case "gt":
			p = !lt && !eq
		case "ge":
			p = !lt
		}
		th.regs[a[0].reg] = 0
		if p {
			th.regs[a[0].reg] = 1
		}
	case "atom":
		addr := th.regs[a[1].reg]
		old, v := th.mem.u64(addr), src(2)
		if in.mods[1] == "add" {
			th.mem.setU64(addr, old+v)
		} else {
			th.mem.setU64(addr, min(old, v))
		}
		set(old)
	case "fma":
		set(bitsOf(float32(math.FMA(float64(f32(src(1))), float64(f32(src(2))), float64(f32(src(3)))))))
	default:
		panic("unsupported " + in.op)
	}
	return 0, false
}
