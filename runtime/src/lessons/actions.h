// lessons/actions.h (private): one function per lesson action. Each runs its experiment on the
// simulator and fills `out` with the observables of lessons/FORMAT.md as it goes, so that when the
// runtime raises an error half-way the observables produced before it stay (run_action in
// actions.cpp records the error). Warnings go to out["warnings"].
#pragma once

#include "furnace/lesson.h"  // defines: DevicesSetup, ..., Observables

namespace furnace::lesson::detail {

void run_devices(const DevicesSetup& s, Observables& out);                  // action_devices.cpp
void run_forward(const ForwardSetup& s, Observables& out, TraceBus* trace);  // action_forward.cpp
void run_train(const TrainSetup& s, Observables& out, TraceBus* trace);    // action_train.cpp
void run_memory(const MemorySetup& s, Observables& out);                   // action_memory.cpp
void run_loss_trap(const LossTrapSetup& s, Observables& out);                // action_tools.cpp
void run_scaler(const ScalerSetup& s, Observables& out);                   // action_tools.cpp
void run_machine(const MachineSetup& s, Observables& out);                  // action_tools.cpp
void run_loader(const LoaderSetup& s, Observables& out);                   // action_loader.cpp

// Appends a warning's text to out["warnings"].
void add_warning(Observables& out, const std::string& message);

using lesson::lesson_data_dir;  // declared in furnace/lesson.h

}  // namespace furnace::lesson::detail
