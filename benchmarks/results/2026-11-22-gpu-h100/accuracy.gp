set terminal pngcairo size 900,560
set output 'accuracy.png'
set datafile separator ','
set title 'Fashion-MNIST MLP 784-512-256-10, 10 epochs, NVIDIA H100 80GB HBM3 machine (16 vCPU)'
set xlabel 'wall time of rank 0 (s)'
set ylabel 'test accuracy'
set grid
set key bottom right
set yrange [0.8:0.91]
plot 'cuda-4w2s-sync/metrics.csv' every ::1 using 1:5 with linespoints lw 2 pt 7 title 'cuda, 4 workers, 2 servers, sync', \
     'cuda-2w2s-sync/metrics.csv' every ::1 using 1:5 with linespoints lw 2 pt 7 title 'cuda, 2 workers, 2 servers, sync', \
     'cuda-2w2s-async/metrics.csv' every ::1 using 1:5 with linespoints lw 2 pt 7 title 'cuda, 2 workers, 2 servers, async', \
     'cpu-2w2s-sync/metrics.csv' every ::1 using 1:5 with linespoints lw 2 pt 7 title 'cpu (OpenBLAS), 2 workers, 2 servers, sync', \
     'cuda-1w1s-sync/metrics.csv' every ::1 using 1:5 with linespoints lw 2 pt 7 title 'cuda, 1 worker, 1 server, sync'
