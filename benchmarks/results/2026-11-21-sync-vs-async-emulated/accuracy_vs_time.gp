if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 960,600 noenhanced font ",11"
} else {
  set terminal png size 960,600 noenhanced
}
set output '/work/main/benchmarks/results/2026-11-21-sync-vs-async-emulated/accuracy_vs_time.png'
set datafile separator ","
set title 'Fashion-MNIST: 2 workers, 2 servers, 3 epochs, straggler none, emulated'
set xlabel 'wall time of rank 0 (s)'
set ylabel 'test accuracy'
set grid
set key bottom right
set xrange [0:*]
plot '/work/main/benchmarks/results/2026-11-21-sync-vs-async-emulated/runs/sync/metrics.csv' every ::1 using 1:5 with linespoints lw 2 pt 7 ps 0.8 title 'sync', '/work/main/benchmarks/results/2026-11-21-sync-vs-async-emulated/runs/async/metrics.csv' every ::1 using 1:5 with linespoints lw 2 pt 7 ps 0.8 title 'async', '/work/main/benchmarks/results/2026-11-21-sync-vs-async-emulated/runs/ssp-1/metrics.csv' every ::1 using 1:5 with linespoints lw 2 pt 7 ps 0.8 title 'ssp:1', '/work/main/benchmarks/results/2026-11-21-sync-vs-async-emulated/runs/ssp-4/metrics.csv' every ::1 using 1:5 with linespoints lw 2 pt 7 ps 0.8 title 'ssp:4'
