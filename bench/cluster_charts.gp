# Charts of bench/cluster_compare.sh's tables (gnuplot -e "out='DIR'" bench/cluster_charts.gp).
set terminal pngcairo size 900,520 font ",11"
set datafile separator "\t"
set key top left
set grid

set output out."/busbw.png"
set title "AllReduce busbw across hosts (ring backend)"
set key outside right
set logscale x 2
set format x "%g"
set xlabel "message (MiB)"
set ylabel "busbw (GB/s)"
set yrange [0:*]
plot for [rate in "1gbit 5gbit unshaped"] for [h in "2 4"] \
  out."/busbw.tsv" using (strcol(1) eq rate && strcol(2) eq h && strcol(3) eq "ring" ? $4 / 1048576 : NaN):5 \
  with linespoints title rate.", ".h." hosts", \
  0.125 with lines dashtype 2 title "1 Gbit/s", 0.625 with lines dashtype 2 title "5 Gbit/s"

set output out."/buckets.png"
set title "W1 (MLP) across 2 hosts: DDP bucket cap"
set key top left
set xlabel "bucket cap (MiB)"
set ylabel "samples/s (all ranks)"
plot for [rate in "1gbit unshaped"] out."/buckets.tsv" using (strcol(1) eq rate ? $2 : NaN):3 \
  with linespoints title rate

set output out."/scaling.png"
set title "W1 (MLP) at 1 Gbit/s: hosts"
unset logscale x
set key top right
set xlabel "hosts (one rank each)"
set ylabel "samples/s (all ranks)"
set xtics 1
plot out."/scaling.tsv" using 1:2 every ::1 with linespoints title "ringgrad"
