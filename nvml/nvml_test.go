package nvml

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpuwarden/gpuwarden"
)

// The fake below is an H200 as the anchors measured it: driver 580.159.04,
// CUDA 13.0, 141 GB (143771 MiB as NVML reports it).
const (
	h200UUID  = "GPU-6f1c2c1e-8a4b-4d55-9f43-0c2b6f7e9a10"
	h200Bus   = "00000000:3B:00.0"
	h200Bytes = 143771 << 20
	gib       = 1 << 30
)

var (
	testBoot   = time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	sampleTime = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
)

// fakeNVML is go-nvml's generated mock set up as one H200; tests change
// single functions to make them fail, hang or go missing.
type fakeNVML struct {
	lib *mock.Interface
	dev *mock.Device
	// missing lists the symbols the fake library does not export.
	missing map[string]bool
}

func newFake() *fakeNVML {
	f := &fakeNVML{missing: map[string]bool{}}
	var pci gonvml.PciInfo
	for i, c := range h200Bus {
		pci.BusId[i] = int8(c)
	}
	pci.Domain, pci.Bus, pci.Device = 0, 0x3b, 0
	ok := gonvml.SUCCESS
	f.dev = &mock.Device{
		GetUUIDFunc:   func() (string, gonvml.Return) { return h200UUID, ok },
		GetNameFunc:   func() (string, gonvml.Return) { return "NVIDIA H200", ok },
		GetSerialFunc: func() (string, gonvml.Return) { return "1654123456789", ok },
		GetPciInfoFunc: func() (gonvml.PciInfo, gonvml.Return) {
			return pci, ok
		},
		GetMemoryInfoFunc: func() (gonvml.Memory, gonvml.Return) {
			return gonvml.Memory{Total: h200Bytes, Used: 120 * gib, Free: h200Bytes - 120*gib}, ok
		},
		GetCudaComputeCapabilityFunc: func() (int, int, gonvml.Return) { return 9, 0, ok },
		GetMaxPcieLinkGenerationFunc: func() (int, gonvml.Return) { return 5, ok },
		GetMaxPcieLinkWidthFunc:      func() (int, gonvml.Return) { return 16, ok },
		GetMigModeFunc:               func() (int, int, gonvml.Return) { return gonvml.DEVICE_MIG_DISABLE, gonvml.DEVICE_MIG_DISABLE, ok },
		GetPersistenceModeFunc:       func() (gonvml.EnableState, gonvml.Return) { return gonvml.FEATURE_ENABLED, ok },
		GetEccModeFunc: func() (gonvml.EnableState, gonvml.EnableState, gonvml.Return) {
			return gonvml.FEATURE_ENABLED, gonvml.FEATURE_ENABLED, ok
		},
		GetPowerManagementLimitFunc: func() (uint32, gonvml.Return) { return 700000, ok },
		GetUtilizationRatesFunc:     func() (gonvml.Utilization, gonvml.Return) { return gonvml.Utilization{Gpu: 97, Memory: 64}, ok },
		GetPowerUsageFunc:           func() (uint32, gonvml.Return) { return 612345, ok },
		GetTemperatureFunc:          func(gonvml.TemperatureSensors) (uint32, gonvml.Return) { return 61, ok },
		GetCurrentClocksEventReasonsFunc: func() (uint64, gonvml.Return) {
			return gonvml.ClocksEventReasonSwPowerCap, ok
		},
		GetCurrentClocksThrottleReasonsFunc: func() (uint64, gonvml.Return) {
			return gonvml.ClocksEventReasonSwPowerCap, ok
		},
		GetClockInfoFunc: func(c gonvml.ClockType) (uint32, gonvml.Return) {
			if c == gonvml.CLOCK_SM {
				return 1980, ok
			}
			return 3201, ok
		},
		GetComputeRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) {
			return []gonvml.ProcessInfo{
				{Pid: 4242, UsedGpuMemory: 118 * gib},
				{Pid: 999999, UsedGpuMemory: 1<<64 - 1}, // NVML_VALUE_NOT_AVAILABLE
			}, ok
		},
		GetTotalEccErrorsFunc: func(gonvml.MemoryErrorType, gonvml.EccCounterType) (uint64, gonvml.Return) {
			return 0, ok
		},
		GetRemappedRowsFunc: func() (int, int, bool, bool, gonvml.Return) { return 0, 0, false, false, ok },
		GetRetiredPagesFunc: func(gonvml.PageRetirementCause) ([]uint64, gonvml.Return) {
			return nil, gonvml.ERROR_NOT_SUPPORTED
		},
		GetPcieReplayCounterFunc: func() (int, gonvml.Return) { return 0, ok },
	}
	f.lib = &mock.Interface{
		InitFunc:     func() gonvml.Return { return ok },
		ShutdownFunc: func() gonvml.Return { return ok },
		ExtensionsFunc: func() gonvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(s string) error {
				if f.missing[s] {
					return fmt.Errorf("undefined symbol: %s", s)
				}
				return nil
			}}
		},
		// No event set unless a test gives one: Health then says the NVML
		// Xid source is not live.
		EventSetCreateFunc:             func() (gonvml.EventSet, gonvml.Return) { return nil, gonvml.ERROR_NOT_SUPPORTED },
		SystemGetDriverVersionFunc:     func() (string, gonvml.Return) { return "580.159.04", ok },
		SystemGetCudaDriverVersionFunc: func() (int, gonvml.Return) { return 13000, ok },
		SystemGetNVMLVersionFunc:       func() (string, gonvml.Return) { return "13.580.159.04", ok },
		DeviceGetCountFunc:             func() (int, gonvml.Return) { return 1, ok },
		DeviceGetHandleByIndexFunc: func(i int) (gonvml.Device, gonvml.Return) {
			if i != 0 {
				return nil, gonvml.ERROR_INVALID_ARGUMENT
			}
			return f.dev, ok
		},
	}
	return f
}

// open builds GPUs on the fake, with the seams pointed at testdata.
func (f *fakeNVML) open(t testing.TB) *GPUs {
	t.Helper()
	g, err := newGPUs(f.lib, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("newGPUs: %v", err)
	}
	g.kmsgPath = "testdata/kmsg-h200.txt"
	g.procRoot = "testdata/proc"
	g.now = func() time.Time { return sampleTime }
	g.bootTime = func() (time.Time, error) { return testBoot, nil }
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// wantH200 is the inventory the fake should produce.
func wantH200() gpuwarden.GPU {
	return gpuwarden.GPU{
		Index: 0, UUID: h200UUID, Name: "NVIDIA H200", Model: "H200",
		Serial: "1654123456789", BusID: h200Bus, VRAMBytes: h200Bytes,
		ComputeCapability: "9.0", PCIeGen: 5, PCIeWidth: 16,
		MIG: false, Persistence: true, ECC: true, PowerLimitWatts: 700,
	}
}

// checkErr compares an error with a wanted substring ("" for none) and code.
func checkErr(t *testing.T, err error, want string, code gpuwarden.ErrorCode) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("err = %v, want nil", err)
	case want != "" && err == nil:
		t.Fatalf("err = nil, want %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("err = %q, want it to contain %q", err, want)
	}
	if err != nil && code != "" {
		if got := gpuwarden.ErrorCodeOf(err); got != code {
			t.Fatalf("code = %q, want %q (err %v)", got, code, err)
		}
	}
}

func TestDriver(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*fakeNVML)
		want  gpuwarden.Driver
		err   string
	}{
		{"h200", nil, gpuwarden.Driver{Version: "580.159.04", CUDAVersion: "13.0", NVMLVersion: "13.580.159.04"}, ""},
		{"cuda 12.4", func(f *fakeNVML) {
			f.lib.SystemGetCudaDriverVersionFunc = func() (int, gonvml.Return) { return 12040, gonvml.SUCCESS }
		}, gpuwarden.Driver{Version: "580.159.04", CUDAVersion: "12.4", NVMLVersion: "13.580.159.04"}, ""},
		{"missing cuda symbol", func(f *fakeNVML) { f.missing["nvmlSystemGetCudaDriverVersion"] = true },
			gpuwarden.Driver{Version: "580.159.04", NVMLVersion: "13.580.159.04"}, ""},
		{"failing call", func(f *fakeNVML) {
			f.lib.SystemGetNVMLVersionFunc = func() (string, gonvml.Return) { return "", gonvml.ERROR_UNKNOWN }
		}, gpuwarden.Driver{}, "nvml: nvmlSystemGetNVMLVersion: ERROR_UNKNOWN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			if tt.setup != nil {
				tt.setup(f)
			}
			got, err := f.open(t).Driver(context.Background())
			checkErr(t, err, tt.err, "")
			if err == nil && got != tt.want {
				t.Errorf("Driver() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestList(t *testing.T) {
	notSupported := func(f *fakeNVML) {
		f.dev.GetSerialFunc = func() (string, gonvml.Return) { return "", gonvml.ERROR_NOT_SUPPORTED }
		f.dev.GetEccModeFunc = func() (gonvml.EnableState, gonvml.EnableState, gonvml.Return) {
			return 0, 0, gonvml.ERROR_NOT_SUPPORTED
		}
		f.dev.GetPowerManagementLimitFunc = func() (uint32, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		f.dev.GetMaxPcieLinkGenerationFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		f.dev.GetMigModeFunc = func() (int, int, gonvml.Return) { return 0, 0, gonvml.ERROR_NOT_SUPPORTED }
	}
	tests := []struct {
		name  string
		setup func(*fakeNVML)
		want  func() gpuwarden.GPU
		err   string
		code  gpuwarden.ErrorCode
	}{
		{name: "h200", want: wantH200},
		{name: "not supported fields stay zero", setup: notSupported, want: func() gpuwarden.GPU {
			g := wantH200()
			g.Serial, g.ECC, g.PowerLimitWatts, g.PCIeGen = "", false, 0, 0
			return g
		}},
		{name: "mig enabled, no instances yet", setup: func(f *fakeNVML) {
			f.dev.GetMigModeFunc = func() (int, int, gonvml.Return) {
				return gonvml.DEVICE_MIG_ENABLE, gonvml.DEVICE_MIG_ENABLE, gonvml.SUCCESS
			}
			f.dev.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 7, gonvml.SUCCESS }
			f.dev.GetMigDeviceHandleByIndexFunc = func(int) (gonvml.Device, gonvml.Return) { return nil, gonvml.ERROR_NOT_FOUND }
		}, want: func() gpuwarden.GPU { g := wantH200(); g.MIG = true; return g }},
		{name: "mig layout", setup: setupMIG, want: func() gpuwarden.GPU {
			g := wantH200()
			g.MIG, g.MIGInstances = true, []gpuwarden.MIGInstance{migInstance(0), migInstance(2)}
			return g
		}},
		{name: "missing mig symbol is not called", setup: func(f *fakeNVML) {
			f.missing["nvmlDeviceGetMigMode"] = true
			f.dev.GetMigModeFunc = nil // the mock panics if it is called
		}, want: wantH200},
		{name: "nvl by its name", setup: func(f *fakeNVML) {
			f.dev.GetNameFunc = func() (string, gonvml.Return) { return "NVIDIA H200 NVL", gonvml.SUCCESS }
		}, want: func() gpuwarden.GPU { g := wantH200(); g.Name, g.Model = "NVIDIA H200 NVL", "H200-NVL"; return g }},
		{name: "failing call is named", setup: func(f *fakeNVML) {
			f.dev.GetCudaComputeCapabilityFunc = func() (int, int, gonvml.Return) { return 0, 0, gonvml.ERROR_UNKNOWN }
		}, err: "nvml: gpu 0: nvmlDeviceGetCudaComputeCapability: ERROR_UNKNOWN", code: gpuwarden.EInternal},
		{name: "lost gpu is an environment error", setup: func(f *fakeNVML) {
			f.dev.GetNameFunc = func() (string, gonvml.Return) { return "", gonvml.ERROR_GPU_IS_LOST }
		}, err: "nvmlDeviceGetName: ERROR_GPU_IS_LOST", code: gpuwarden.EEnvironment},
		{name: "no devices", setup: func(f *fakeNVML) {
			f.lib.DeviceGetCountFunc = func() (int, gonvml.Return) { return 0, gonvml.SUCCESS }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			if tt.setup != nil {
				tt.setup(f)
			}
			got, err := f.open(t).List(context.Background())
			checkErr(t, err, tt.err, tt.code)
			if err != nil {
				return
			}
			want := []gpuwarden.GPU{}
			if tt.want != nil {
				want = []gpuwarden.GPU{tt.want()}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("List() =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestSample(t *testing.T) {
	busy := func() gpuwarden.Telemetry {
		return gpuwarden.Telemetry{
			Index: 0, Time: sampleTime, UtilPercent: 97, MemUtilPercent: 64,
			MemUsedBytes: 120 * gib, MemTotalBytes: h200Bytes,
			PowerWatts: 612.345, TempC: 61, SMClockMHz: 1980, MemClockMHz: 3201,
			ThrottleReasons: []string{"sw_power_cap"},
			Processes: []gpuwarden.GPUProcess{
				{PID: 4242, Name: "python3", UsedBytes: 118 * gib},
				{PID: 999999, UsedBytes: 0},
			},
		}
	}
	tests := []struct {
		name  string
		index int
		setup func(*fakeNVML)
		want  func() gpuwarden.Telemetry
		err   string
		code  gpuwarden.ErrorCode
		// notCalled checks that a function behind a missing symbol was skipped.
		notCalled func(*fakeNVML) int
	}{
		{name: "busy h200", want: busy},
		{name: "idle h200", setup: func(f *fakeNVML) {
			f.dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) { return gonvml.Utilization{}, gonvml.SUCCESS }
			f.dev.GetCurrentClocksEventReasonsFunc = func() (uint64, gonvml.Return) {
				return gonvml.ClocksEventReasonGpuIdle, gonvml.SUCCESS
			}
			f.dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.SUCCESS }
		}, want: func() gpuwarden.Telemetry {
			t := busy()
			t.UtilPercent, t.MemUtilPercent, t.ThrottleReasons, t.Processes = 0, 0, []string{"gpu_idle"}, nil
			return t
		}},
		{name: "every throttle reason", setup: func(f *fakeNVML) {
			f.dev.GetCurrentClocksEventReasonsFunc = func() (uint64, gonvml.Return) { return 0x1ff | 0x1000, gonvml.SUCCESS }
		}, want: func() gpuwarden.Telemetry {
			t := busy()
			t.ThrottleReasons = []string{"gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
				"sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
				"display_clock_setting", "unknown_0x1000"}
			return t
		}},
		// The old reader left these at zero with nothing to say so: a
		// card without a process list read as one running nothing.
		{name: "not supported fields are unknown", setup: func(f *fakeNVML) {
			f.dev.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
			f.dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
				return nil, gonvml.ERROR_NO_PERMISSION
			}
			f.dev.GetCurrentClocksEventReasonsFunc = func() (uint64, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		}, want: func() gpuwarden.Telemetry {
			t := busy()
			t.PowerWatts, t.Processes, t.ThrottleReasons = 0, nil, nil
			t.Unknown = map[string]string{"power_w": "not-supported", "processes": "no-permission", "throttle_reasons": "not-supported"}
			return t
		}},
		// nvml.h: utilization is not supported on a GPU in MIG mode, and the
		// device's process list needs privileges; the instances have theirs.
		{name: "mig", setup: setupMIG, want: func() gpuwarden.Telemetry {
			t := busy()
			t.UtilPercent, t.MemUtilPercent, t.Processes = 0, 0, nil
			t.Unknown = map[string]string{"util_percent": "mig", "mem_util_percent": "mig", "processes": "no-permission"}
			t.MIG = []gpuwarden.MIGSample{
				{MIGInstance: migInstance(0), MemUsedBytes: 30 * gib,
					Processes: []gpuwarden.GPUProcess{{PID: 4242, Name: "python3", UsedBytes: 29 * gib}},
					Unknown:   map[string]string{"util_percent": "not-supported"}},
				{MIGInstance: migInstance(2), MemUsedBytes: 15 << 20, Unknown: map[string]string{"util_percent": "not-supported"}},
			}
			return t
		}},
		// GPM is an extra: a failing query leaves the instances' utilization
		// unknown and must not fail the sample.
		{name: "mig with a failing gpm query", setup: func(f *fakeNVML) {
			setupMIG(f)
			f.dev.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) { return gonvml.GpmSupport{}, gonvml.ERROR_UNKNOWN }
		}, want: func() gpuwarden.Telemetry {
			t := busy()
			t.UtilPercent, t.MemUtilPercent, t.Processes = 0, 0, nil
			t.Unknown = map[string]string{"util_percent": "mig", "mem_util_percent": "mig", "processes": "no-permission"}
			t.MIG = []gpuwarden.MIGSample{
				{MIGInstance: migInstance(0), MemUsedBytes: 30 * gib,
					Processes: []gpuwarden.GPUProcess{{PID: 4242, Name: "python3", UsedBytes: 29 * gib}},
					Unknown:   map[string]string{"util_percent": "not-supported"}},
				{MIGInstance: migInstance(2), MemUsedBytes: 15 << 20, Unknown: map[string]string{"util_percent": "not-supported"}},
			}
			return t
		}},
		{name: "old driver falls back to throttle reasons", setup: func(f *fakeNVML) {
			f.missing["nvmlDeviceGetCurrentClocksEventReasons"] = true
			f.dev.GetCurrentClocksThrottleReasonsFunc = func() (uint64, gonvml.Return) {
				return gonvml.ClocksThrottleReasonHwThermalSlowdown | gonvml.ClocksThrottleReasonHwSlowdown, gonvml.SUCCESS
			}
		}, want: func() gpuwarden.Telemetry {
			t := busy()
			t.ThrottleReasons = []string{"hw_slowdown", "hw_thermal_slowdown"}
			return t
		}, notCalled: func(f *fakeNVML) int { return len(f.dev.GetCurrentClocksEventReasonsCalls()) }},
		{name: "no such gpu", index: 3, err: "no GPU with index 3", code: gpuwarden.ENotFound},
		{name: "negative index", index: -1, err: "no GPU with index -1", code: gpuwarden.ENotFound},
		{name: "failing call is named", setup: func(f *fakeNVML) {
			f.dev.GetTemperatureFunc = func(gonvml.TemperatureSensors) (uint32, gonvml.Return) { return 0, gonvml.ERROR_UNKNOWN }
		}, err: "nvml: gpu 0: nvmlDeviceGetTemperature: ERROR_UNKNOWN", code: gpuwarden.EInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			if tt.setup != nil {
				tt.setup(f)
			}
			got, err := f.open(t).Sample(context.Background(), tt.index)
			checkErr(t, err, tt.err, tt.code)
			if tt.notCalled != nil {
				if n := tt.notCalled(f); n != 0 {
					t.Errorf("function behind a missing symbol called %d times", n)
				}
			}
			if err != nil {
				return
			}
			if want := tt.want(); !reflect.DeepEqual(got, want) {
				t.Errorf("Sample() =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestSampleWrapsNVMLError(t *testing.T) {
	f := newFake()
	f.dev.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return 0, gonvml.ERROR_UNKNOWN }
	_, err := f.open(t).Sample(context.Background(), 0)
	if !errors.Is(err, gonvml.ERROR_UNKNOWN) {
		t.Fatalf("err = %v, want it to wrap ERROR_UNKNOWN", err)
	}
}

func TestHealth(t *testing.T) {
	// The Xids of 3b:00 in testdata/kmsg-h200.txt.
	at := func(usec int64) time.Time { return testBoot.Add(time.Duration(usec) * time.Microsecond) }
	logXIDs := []gpuwarden.XIDEvent{
		{Index: 0, XID: 13, Time: at(86400123456)},
		{Index: 0, XID: 13, Time: at(86400123470)},
		{Index: 0, XID: 94, Time: at(95000000001)},
		{Index: 0, XID: 48, Time: at(99000000000)},
		{Index: 0, XID: 119, Time: at(99000000100)},
	}
	noRemap := func(f *fakeNVML) {
		f.dev.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) {
			return 0, 0, false, false, gonvml.ERROR_NOT_SUPPORTED
		}
	}
	const noKmsg = "testdata/no-such-kmsg"
	tests := []struct {
		name  string
		setup func(*fakeNVML)
		kmsg  string // the kernel log; the H200 fixture when empty
		want  gpuwarden.Health
		// sources is what DescribeXIDSources says, when the test cares;
		// watch starts the NVML event watch first.
		sources   string
		watch     bool
		err       string
		notCalled func(*fakeNVML) int
	}{
		{name: "h200 with xids in the kernel log", want: gpuwarden.Health{XIDs: logXIDs},
			sources: "kmsg live"},
		// The old reader returned no Xids and nothing else here: the same
		// answer as a clean card.
		{name: "unreadable kernel log", kmsg: noKmsg, want: gpuwarden.Health{},
			sources: "kmsg unavailable (open testdata/no-such-kmsg: no such file or directory)"},
		{name: "unreadable kernel log, no event set", kmsg: noKmsg, watch: true, want: gpuwarden.Health{},
			sources: "kmsg unavailable (open testdata/no-such-kmsg: no such file or directory), nvml-events unavailable (nvmlEventSetCreate: ERROR_NOT_SUPPORTED)"},
		{name: "mig: row remapping unknown", kmsg: noKmsg, setup: setupMIG,
			want: gpuwarden.Health{Unknown: map[string]string{"remap_pending": "mig", "remap_failed": "mig"}}},
		{name: "ecc errors and a pending remap", kmsg: noKmsg, setup: func(f *fakeNVML) {
			f.dev.GetTotalEccErrorsFunc = func(_ gonvml.MemoryErrorType, c gonvml.EccCounterType) (uint64, gonvml.Return) {
				if c == gonvml.VOLATILE_ECC {
					return 2, gonvml.SUCCESS
				}
				return 5, gonvml.SUCCESS
			}
			f.dev.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) {
				return 0, 1, true, false, gonvml.SUCCESS
			}
		}, want: gpuwarden.Health{ECCVolatileUncorrected: 2, ECCAggregateUncorrected: 5, RemapPending: true},
			notCalled: func(f *fakeNVML) int { return len(f.dev.GetRetiredPagesCalls()) }},
		{name: "failed remap", kmsg: noKmsg, setup: func(f *fakeNVML) {
			f.dev.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) {
				return 0, 0, false, true, gonvml.SUCCESS
			}
		}, want: gpuwarden.Health{RemapFailed: true}},
		{name: "consumer card without ecc", kmsg: noKmsg, setup: func(f *fakeNVML) {
			noRemap(f)
			f.dev.GetTotalEccErrorsFunc = func(gonvml.MemoryErrorType, gonvml.EccCounterType) (uint64, gonvml.Return) {
				return 0, gonvml.ERROR_NOT_SUPPORTED
			}
		}, want: gpuwarden.Health{Unknown: map[string]string{"ecc_volatile_uncorrected": "not-supported", "ecc_aggregate_uncorrected": "not-supported"}}},
		{name: "pre-ampere retires pages", kmsg: noKmsg, setup: func(f *fakeNVML) {
			noRemap(f)
			f.dev.GetRetiredPagesFunc = func(c gonvml.PageRetirementCause) ([]uint64, gonvml.Return) {
				if c == gonvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR {
					return []uint64{0x1a2b3, 0x1a2b4}, gonvml.SUCCESS
				}
				return []uint64{0x7f00, 0x7f01, 0x7f02}, gonvml.SUCCESS
			}
		}, want: gpuwarden.Health{RetiredPages: 5}},
		{name: "missing remapped rows symbol", kmsg: noKmsg, setup: func(f *fakeNVML) {
			f.missing["nvmlDeviceGetRemappedRows"] = true
			f.dev.GetRemappedRowsFunc = nil // the mock panics if it is called
		}, want: gpuwarden.Health{}},
		{name: "failing call is named", setup: func(f *fakeNVML) {
			f.dev.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) {
				return 0, 0, false, false, gonvml.ERROR_UNKNOWN
			}
		}, err: "nvml: gpu 0: nvmlDeviceGetRemappedRows: ERROR_UNKNOWN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			if tt.setup != nil {
				tt.setup(f)
			}
			g := f.open(t)
			if tt.kmsg != "" {
				g.kmsgPath = tt.kmsg
			}
			if tt.watch {
				g.WatchXIDEvents(context.Background())
			}
			got, err := g.Health(context.Background(), 0)
			checkErr(t, err, tt.err, "")
			if tt.notCalled != nil {
				if n := tt.notCalled(f); n != 0 {
					t.Errorf("function that should be skipped called %d times", n)
				}
			}
			if err != nil {
				return
			}
			if s := gpuwarden.DescribeXIDSources(got.XIDSources); tt.sources != "" && s != tt.sources {
				t.Errorf("xid sources %q, want %q", s, tt.sources)
			}
			got.XIDSources = nil
			if !equalHealth(got, tt.want) {
				t.Errorf("Health() =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// equalHealth compares Health values, times by instant.
func equalHealth(a, b gpuwarden.Health) bool {
	ax, bx := a.XIDs, b.XIDs
	a.XIDs, b.XIDs = nil, nil
	// The counters have their own table in counters_test.go.
	a.Counters, b.Counters = gpuwarden.ErrorCounters{}, gpuwarden.ErrorCounters{}
	return reflect.DeepEqual(a, b) && equalXIDs(ax, bx)
}

// TestHungCall makes one NVML function block and checks that each method
// returns at the context's deadline, names the function, refuses later calls
// while it stays stuck and recovers once it returns.
func TestHungCall(t *testing.T) {
	tests := []struct {
		name string
		fn   string
		hang func(f *fakeNVML, block func())
		call func(context.Context, *GPUs) error
	}{
		{"driver", "nvmlSystemGetDriverVersion", func(f *fakeNVML, block func()) {
			f.lib.SystemGetDriverVersionFunc = func() (string, gonvml.Return) { block(); return "580.159.04", gonvml.SUCCESS }
		}, func(ctx context.Context, g *GPUs) error { _, err := g.Driver(ctx); return err }},
		{"list", "nvmlDeviceGetSerial", func(f *fakeNVML, block func()) {
			f.dev.GetSerialFunc = func() (string, gonvml.Return) { block(); return "", gonvml.SUCCESS }
		}, func(ctx context.Context, g *GPUs) error { _, err := g.List(ctx); return err }},
		{"sample", "nvmlDeviceGetPowerUsage", func(f *fakeNVML, block func()) {
			f.dev.GetPowerUsageFunc = func() (uint32, gonvml.Return) { block(); return 0, gonvml.SUCCESS }
		}, func(ctx context.Context, g *GPUs) error { _, err := g.Sample(ctx, 0); return err }},
		{"health", "nvmlDeviceGetRemappedRows", func(f *fakeNVML, block func()) {
			f.dev.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) { block(); return 0, 0, false, false, gonvml.SUCCESS }
		}, func(ctx context.Context, g *GPUs) error { _, err := g.Health(ctx, 0); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			release := make(chan struct{})
			var once sync.Once
			unblock := func() { once.Do(func() { close(release) }) }
			t.Cleanup(unblock)
			first := true
			var mu sync.Mutex
			tt.hang(f, func() {
				mu.Lock()
				hang := first
				first = false
				mu.Unlock()
				if hang {
					<-release
				}
			})
			g := f.open(t)

			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := tt.call(ctx, g)
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("returned after %v, want about 50ms", took)
			}
			checkErr(t, err, "nvml call timed out: "+tt.fn, gpuwarden.EEnvironment)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want it to wrap context.DeadlineExceeded", err)
			}

			// While the call is stuck, later calls fail at once.
			err = tt.call(context.Background(), g)
			checkErr(t, err, "nvml is stuck in "+tt.fn, gpuwarden.EEnvironment)
			if cerr := g.Close(); cerr == nil || !strings.Contains(cerr.Error(), "shutdown skipped") {
				t.Errorf("Close() with a stuck call = %v, want shutdown skipped", cerr)
			}
			if n := len(f.lib.ShutdownCalls()); n != 0 {
				t.Errorf("nvmlShutdown called %d times under a stuck call", n)
			}

			// Once the driver answers, calls work again.
			g.closed.Store(false)
			unblock()
			waitUnstuck(t, g)
			if err := tt.call(context.Background(), g); err != nil {
				t.Fatalf("after the call returned: %v", err)
			}
		})
	}
}

// waitUnstuck waits for abandoned calls to come back.
func waitUnstuck(t *testing.T, g *GPUs) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, _, stuck := g.stuckCall(); !stuck {
			return
		}
	}
	t.Fatal("abandoned call never came back")
}

func TestCancelledContextCallsNothing(t *testing.T) {
	f := newFake()
	g := f.open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := g.Sample(ctx, 0)
	checkErr(t, err, "nvml call cancelled", gpuwarden.EEnvironment)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want it to wrap context.Canceled", err)
	}
	if n := len(f.lib.DeviceGetHandleByIndexCalls()); n != 0 {
		t.Errorf("NVML called %d times with a cancelled context", n)
	}
}

func TestPanicBecomesError(t *testing.T) {
	f := newFake()
	f.dev.GetPowerUsageFunc = func() (uint32, gonvml.Return) { panic("boom") }
	_, err := f.open(t).Sample(context.Background(), 0)
	checkErr(t, err, "nvml: panic in nvmlDeviceGetPowerUsage: boom", gpuwarden.EInternal)
}

func TestClose(t *testing.T) {
	f := newFake()
	g := f.open(t)
	if err := g.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close() = %v", err)
	}
	if n := len(f.lib.ShutdownCalls()); n != 1 {
		t.Errorf("nvmlShutdown called %d times, want 1", n)
	}
	if _, err := g.Sample(context.Background(), 0); !errors.Is(err, errClosed) {
		t.Errorf("Sample after Close = %v, want %v", err, errClosed)
	}
}

func TestCloseReportsShutdownFailure(t *testing.T) {
	f := newFake()
	f.lib.ShutdownFunc = func() gonvml.Return { return gonvml.ERROR_UNKNOWN }
	err := f.open(t).Close()
	checkErr(t, err, "nvml: nvmlShutdown: ERROR_UNKNOWN", "")
}

func TestHandlesAreCached(t *testing.T) {
	f := newFake()
	g := f.open(t)
	for range 3 {
		if _, err := g.Sample(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(f.lib.DeviceGetHandleByIndexCalls()); n != 1 {
		t.Errorf("nvmlDeviceGetHandleByIndex called %d times for 3 samples, want 1", n)
	}
}

func TestInitErrors(t *testing.T) {
	tests := []struct {
		ret  gonvml.Return
		want string
	}{
		{gonvml.ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver: libnvidia-ml.so.1 not found"},
		{gonvml.ERROR_DRIVER_NOT_LOADED, "no NVIDIA driver: the kernel module is not loaded"},
		{gonvml.ERROR_LIB_RM_VERSION_MISMATCH, "no NVIDIA driver: libnvidia-ml and the kernel module are different versions"},
		{gonvml.ERROR_NO_PERMISSION, "no NVIDIA driver: no permission"},
		{gonvml.ERROR_UNKNOWN, "no NVIDIA driver: nvmlInit: ERROR_UNKNOWN"},
	}
	for _, tt := range tests {
		t.Run(tt.ret.String(), func(t *testing.T) {
			f := newFake()
			f.lib.InitFunc = func() gonvml.Return { return tt.ret }
			_, err := newGPUs(f.lib, nil)
			checkErr(t, err, tt.want, gpuwarden.EEnvironment)
			if gpuwarden.ErrorHint(err) == "" {
				t.Error("no hint")
			}
			if !errors.Is(err, tt.ret) {
				t.Errorf("err = %v, want it to wrap %v", err, tt.ret)
			}
		})
	}
}

// TestNewWithoutDriver runs the real New: on a host without the NVIDIA
// driver, as CI is, it must be an environment error, not a crash.
func TestNewWithoutDriver(t *testing.T) {
	g, err := New(nil)
	if err == nil {
		_ = g.Close()
		t.Skip("an NVIDIA driver is present on this host")
	}
	checkErr(t, err, "no NVIDIA driver", gpuwarden.EEnvironment)
	if gpuwarden.ErrorHint(err) == "" {
		t.Error("no hint")
	}
	if _, statErr := os.Stat("/dev/nvidiactl"); os.IsNotExist(statErr) && errors.Is(err, gonvml.ERROR_LIBRARY_NOT_FOUND) {
		if want := "no NVIDIA driver: libnvidia-ml.so.1 not found"; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("err = %q, want it to start with %q", err, want)
		}
	}
}

func TestCudaVersion(t *testing.T) {
	for v, want := range map[int]string{13000: "13.0", 12040: "12.4", 12080: "12.8", 11020: "11.2", 0: ""} {
		if got := cudaVersion(v); got != want {
			t.Errorf("cudaVersion(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestProcBootTime(t *testing.T) {
	boot, err := procBootTime()
	if err != nil {
		t.Skipf("no /proc/stat: %v", err)
	}
	if boot.After(time.Now()) || boot.Before(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("boot time %v is not plausible", boot)
	}
}

// BenchmarkSampleOverhead measures what the package adds to one sample (the
// goroutine, the bounded wait, the bookkeeping) on the mock, without a driver;
// BenchmarkSample in gpu_test.go measures the real thing.
func BenchmarkSampleOverhead(b *testing.B) {
	f := newFake()
	f.dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.SUCCESS }
	g := f.open(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := g.Sample(ctx, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// setupMIG puts the fake H200 in MIG mode with two 3g.71gb instances in
// slots 0 and 2 (slot 1 empty): utilization not supported, the device's
// process list refused, GPM not supported.
func setupMIG(f *fakeNVML) {
	ok := gonvml.SUCCESS
	f.dev.GetMigModeFunc = func() (int, int, gonvml.Return) { return gonvml.DEVICE_MIG_ENABLE, gonvml.DEVICE_MIG_ENABLE, ok }
	f.dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) { return gonvml.Utilization{}, gonvml.ERROR_NOT_SUPPORTED }
	f.dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.ERROR_NO_PERMISSION }
	f.dev.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) { return 0, 0, false, false, gonvml.ERROR_NOT_SUPPORTED }
	f.dev.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) { return gonvml.GpmSupport{}, gonvml.ERROR_NOT_SUPPORTED }
	f.dev.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 3, ok }
	used := map[int]uint64{0: 30 * gib, 2: 15 << 20}
	procs := map[int][]gonvml.ProcessInfo{0: {{Pid: 4242, UsedGpuMemory: 29 * gib}}}
	f.dev.GetMigDeviceHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if i == 1 {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		m := migInstance(i)
		return &mock.Device{
			GetUUIDFunc:              func() (string, gonvml.Return) { return m.UUID, ok },
			GetNameFunc:              func() (string, gonvml.Return) { return "NVIDIA H200 MIG " + m.Profile, ok },
			GetGpuInstanceIdFunc:     func() (int, gonvml.Return) { return m.GPUInstanceID, ok },
			GetComputeInstanceIdFunc: func() (int, gonvml.Return) { return m.ComputeInstanceID, ok },
			GetMemoryInfoFunc: func() (gonvml.Memory, gonvml.Return) {
				return gonvml.Memory{Total: m.MemTotalBytes, Used: used[i]}, ok
			},
			GetComputeRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) { return procs[i], ok },
		}, ok
	}
}

// migInstance is the fake's MIG device in slot i.
func migInstance(i int) gpuwarden.MIGInstance {
	return gpuwarden.MIGInstance{Index: i, UUID: fmt.Sprintf("MIG-6f1c2c1e-0000-4000-8000-00000000000%d", i),
		GPUInstanceID: 1 + i, ComputeInstanceID: 0, Profile: "3g.71gb", MemTotalBytes: 71 * gib}
}

// TestMIGGPMUtilization: on a card with GPM, an instance's utilization is
// pending at the first sample (GPM rates need an interval) and GPM's SM
// utilization from the second on; each kept sample is freed once.
func TestMIGGPMUtilization(t *testing.T) {
	f := newFake()
	setupMIG(f)
	f.dev.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
		return gonvml.GpmSupport{IsSupportedDevice: 1}, gonvml.SUCCESS
	}
	var mu sync.Mutex
	allocated, freed := 0, 0
	f.lib.GpmSampleAllocFunc = func() (gonvml.GpmSample, gonvml.Return) {
		mu.Lock()
		allocated++
		mu.Unlock()
		return &mock.GpmSample{FreeFunc: func() gonvml.Return { mu.Lock(); freed++; mu.Unlock(); return gonvml.SUCCESS }}, gonvml.SUCCESS
	}
	f.dev.GpmMigSampleGetFunc = func(int, gonvml.GpmSample) gonvml.Return { return gonvml.SUCCESS }
	f.lib.GpmMetricsGetFunc = func(m *gonvml.GpmMetricsGetType) gonvml.Return {
		if m.NumMetrics != 1 || m.Metrics[0].MetricId != uint32(gonvml.GPM_METRIC_SM_UTIL) || m.Sample1 == m.Sample2 {
			t.Errorf("GpmMetricsGet asked %+v", m.Metrics[0])
		}
		m.Metrics[0].Value = 42
		return gonvml.SUCCESS
	}
	g := f.open(t)
	first, err := g.Sample(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if r := first.MIG[0].Unknown[gpuwarden.FieldUtil]; r != gpuwarden.UnknownPending {
		t.Errorf("first sample: instance utilization %q, want pending", r)
	}
	second, err := g.Sample(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range second.MIG {
		if !m.Known(gpuwarden.FieldUtil) || m.UtilPercent != 42 {
			t.Errorf("second sample: instance %d utilization %v (%v), want 42", m.Index, m.UtilPercent, m.Unknown)
		}
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if allocated != 4 || freed != 4 {
		t.Errorf("%d GPM samples allocated, %d freed; want 4 and 4", allocated, freed)
	}
}
