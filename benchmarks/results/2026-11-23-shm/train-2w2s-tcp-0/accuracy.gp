if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 900,560 noenhanced font ",11"
} else {
  set terminal png size 900,560 noenhanced
}
set output '/work/main/benchmarks/results/2026-11-23-shm/train-2w2s-tcp-0/accuracy.png'
set datafile separator ","
set title 'Fashion-MNIST MLP: 2 workers, 2 servers, sync, 3 epochs - final test accuracy 0.8807'
set xlabel 'wall time of rank 0 (s)'
set ylabel 'test accuracy'
set grid
set key bottom right
set xrange [0:*]
set offsets 0, graph 0.02, graph 0.05, graph 0.05
plot '/work/main/benchmarks/results/2026-11-23-shm/train-2w2s-tcp-0/metrics.csv' every ::1 using 1:5 with linespoints lw 2 pt 7 ps 1.2 lc rgb '#1f77b4' title 'test accuracy (rank 0)'
