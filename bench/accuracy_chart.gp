# The chart of bench/time_to_accuracy.sh's curves
# (gnuplot -e "out='DIR'; seed='0'; target=84" bench/accuracy_chart.gp).
set terminal pngcairo size 900,520 font ",11"
set datafile separator "\t"
set grid
set key bottom right

set output out."/accuracy.png"
set title "W1 (MLP) across 2 hosts at 1 Gbit/s: test accuracy against training time (seed ".seed.")"
set xlabel "training time (s)"
set ylabel "test accuracy (%)"
set yrange [70:90]
set xrange [0:*]
plot for [h in "allreduce fp16 bf16 fp8-e4m3 fp8-e5m2 powersgd"] \
  out."/accuracy.tsv" using (strcol(1) eq h && strcol(2) eq seed ? $4 : NaN):5 with lines linewidth 2 title h, \
  target with lines dashtype 2 linecolor "gray" title sprintf("%g%%", target)
