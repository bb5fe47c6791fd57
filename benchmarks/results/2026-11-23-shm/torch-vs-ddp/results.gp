set terminal pngcairo size 1200,480
set output 'benchmarks/results/2026-11-23-shm/torch-vs-ddp/results.png'
set multiplot layout 1,2
set title 'test accuracy (mlp, 2 workers, batch 64)'
set xlabel 'wall time of rank 0 (s)'
set ylabel 'test accuracy'
set grid
set key bottom right
plot 'benchmarks/results/2026-11-23-shm/torch-vs-ddp/curves.dat' index 0 using 1:2 with linespoints lw 2 pt 7 title 'through the servers (sync)', '' index 1 using 1:2 with linespoints lw 2 pt 7 title 'PyTorch DDP (gloo)'
set title 'samples/s per repetition (ratio 1.96)'
set xlabel 'repetition'
set ylabel 'samples/s'
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.8
set yrange [0:*]
set key below
plot 'benchmarks/results/2026-11-23-shm/torch-vs-ddp/runs.dat' using 2:xtic(1) title 'through the servers', '' using 3 title 'PyTorch DDP'
unset multiplot
