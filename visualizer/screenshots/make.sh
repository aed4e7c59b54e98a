#!/usr/bin/env bash
# Remakes the README's screenshots of furnace-viz under Xvfb (Mesa's software renderer).
#   visualizer/screenshots/make.sh [path/to/furnace-viz]   (default: build/release/visualizer/furnace-viz)
set -euo pipefail
cd "$(dirname "$0")/../.."
viz=${1:-build/release/visualizer/furnace-viz}
out=visualizer/screenshots
shot() { xvfb-run -a -s "-screen 0 1280x800x24" "$viz" --training-priority normal "$@"; }
# The whole window at its default size (1280x800): a live run, English and Chinese, fp16.
shot --topology dgx-h100 --parallel dp --wait-steps 60 --frames 30 --stage scatter --screenshot $out/overview.png
shot --topology dgx-h100 --parallel dp --wait-steps 60 --frames 30 --stage reduce --lang zh --screenshot $out/overview-zh.png
shot --topology mixed-3090-3060 --parallel dp --amp fp16 --wait-steps 40 --frames 30 --stage forward --screenshot $out/mixed-fp16.png
# DistributedDataParallel on 8 ranks: the Step flow on bucket 1's ring all-reduce, every GPU alike in Memory.
shot --topology dgx-h100 --parallel ddp --wait-steps 20 --frames 30 --stage all_reduce --screenshot $out/ddp.png
# Lessons beside the live panels (1280x800): a prediction not answered yet (nothing gives it
# away), a step after "Run and check" (its own run, held), lesson 5's DataParallel step, Chinese.
shot --lesson 03-device-mapping --lesson-step 1 --frames 20 --screenshot $out/lesson-predict.png
shot --lesson 03-device-mapping --lesson-step 2 --lesson-run --wait-steps 1 --frames 20 --screenshot $out/lesson.png
shot --lesson 05-memory --lesson-step 5 --lesson-run --wait-steps 2 --frames 20 --screenshot $out/lesson-memory.png
shot --lesson 01-single-card --lesson-step 2 --lesson-run --lang zh --frames 20 --screenshot $out/lesson-zh.png
# One panel alone, closer up.
shot --topology workstation-4x3090 --visible 2,0,-1,1 --paused --panel devices --size 900x400 --frames 30 --screenshot $out/devices.png
shot --topology dgx-h100 --parallel dp --device-ids 0,1,2,3 --panel flow --size 960x440 --wait-steps 40 --frames 30 --stage reduce --screenshot $out/step-flow.png
shot --topology dgx-h100 --parallel dp --panel memory --size 960x460 --wait-steps 60 --frames 60 --screenshot $out/memory.png
shot --topology dgx-h100 --parallel dp --panel training --size 960x440 --wait-steps 300 --frames 10 --step-delay-ms 0 --screenshot $out/training.png
shot --topology dgx-h100 --parallel dp --device-ids 0,1,2,3 --panel timeline --size 960x440 --wait-steps 30 --frames 10 --screenshot $out/timeline.png
shot --topology dgx-h100 --parallel dp --panel controls --size 520x440 --wait-steps 5 --frames 10 --screenshot $out/controls.png
ls -l $out/*.png
