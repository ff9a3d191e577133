// The simulated GPU, seen from the shim (simulated_device.cpp).
#pragma once

namespace memtrace::hooks {

// Finds the simulated GPU's C API, if the process runs on it and it was not found yet
// (Note [Finding the simulated GPU] in simulated_device.cpp): hands the recorder the card
// (setSimulatedDevice) and registers the read observer. Called at library init and whenever a
// new device is described; a no-op once found.
void findSimulatedDevice();

}  // namespace memtrace::hooks
