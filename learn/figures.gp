# The teaching track's pictures, from learn/figures.sh's tables (gnuplot -e "out='DIR'" learn/figures.gp).
set terminal pngcairo size 900,420 font ",11" noenhanced
set datafile separator "\t"
set grid

# One DDP step: per rank a compute row (forward, backward's nodes, waiting for the buckets) and a
# communication row (each bucket's reduction); communication drawn under backward is hidden.
set output out."/timeline.png"
set title "One DDP step, 2 ranks, a simulated 1 GB/s link (200 us per operation), 1 MiB buckets"
set xlabel "ms from the step's start"
set ytics ("rank 0 comm" 0, "rank 0 compute" 1, "rank 1 comm" 2, "rank 1 compute" 3)
set yrange [-0.6:3.6]
set key outside right
row(r, kind) = 2 * r + (kind eq "compute" ? 1 : 0)
plot out."/timeline.tsv" using (($4 + $5) / 2):(strcol(3) eq "forward" ? row($1, strcol(2)) : NaN):(($5 - $4) / 2):(0.35) \
       skip 1 with boxxyerror fill solid 0.8 lc rgb "#4c72b0" title "forward", \
     "" using (($4 + $5) / 2):(strcol(3) eq "backward" ? row($1, strcol(2)) : NaN):(($5 - $4) / 2):(0.35) \
       skip 1 with boxxyerror fill solid 0.8 lc rgb "#55a868" title "backward", \
     "" using (($4 + $5) / 2):(strcol(3) eq "wait for buckets" ? row($1, strcol(2)) : NaN):(($5 - $4) / 2):(0.35) \
       skip 1 with boxxyerror fill solid 0.8 lc rgb "#c44e52" title "waiting for buckets", \
     "" using (($4 + $5) / 2):(strcol(2) eq "comm" ? row($1, strcol(2)) : NaN):(($5 - $4) / 2):(0.35) \
       skip 1 with boxxyerror fill solid 0.8 lc rgb "#8172b2" title "a bucket's AllReduce"
unset ytics
set ytics
set autoscale y
set key inside top right

# Memory per rank by kind: DDP against ZeRO's stages.
set output out."/memory.png"
set title "GPT-mini, f16 AdamW, 2 ranks: a rank's model state between steps (memory report)"
set xlabel ""
set ylabel "MiB"
set style data histograms
set style histogram rowstacked
set style fill solid 0.8 border -1
set boxwidth 0.6
set yrange [0:*]
plot for [i = 2:5] out."/memory.tsv" using i:xtic(1) title columnheader(i)
set style data linespoints

# AllReduce bus bandwidth against message size.
set output out."/busbw.png"
set title "AllReduce on this machine, 2 ranks: bus bandwidth against message size"
set xlabel "message (bytes)"
set ylabel "busbw (GB/s)"
set logscale x 2
set format x "%.0b %BB"
set key top left
plot for [b in "ring tree auto"] out."/busbw.tsv" using (strcol(1) eq b ? $2 : NaN):3 skip 1 with linespoints title b

# Overlap against the bucket cap.
set output out."/overlap.png"
set title "W1, 2 ranks, simulated 1 GB/s link: communication hidden behind backward"
set xlabel "DDP bucket cap (MiB)"
set ylabel "overlap (%)"
set format x "%g"  # log scale kept from the busbw chart: the caps run 0.25 .. 25 MiB
set yrange [0:100]
unset key
plot out."/overlap.tsv" using 1:2 skip 1 with linespoints

# The schedules: every message of one AllReduce as an arrow from its sender to its receiver, in the
# round it could go (learn_schedules, 4 ranks, 2 per node); red arrows cross between the nodes.
set terminal pngcairo size 1200,420 font ",10" noenhanced
set output out."/schedules.png"
unset title
set multiplot layout 1,3 title "One AllReduce of S bytes on 4 ranks (nodes {0,1} and {2,3}), as ringgrad sends it; red: between nodes"
set xlabel "round"
set ylabel "rank"
set yrange [3.5:-0.5]
set ytics 1
unset logscale
set format x "%g"
set format y "%g"
set xtics 1
set autoscale xfix
set offsets 0.5, 0.5, 0, 0
set grid
unset key
sched = out."/schedules.tsv"
do for [b in "ring tree hierarchical"] {
  set title b
  plot sched using (strcol(1) eq b && $7 == 0 ? $2 - 0.35 : NaN):3:(0.7):($4 - $3) skip 1 \
         with vectors head filled size 0.08,20 lw 1.5 lc rgb "#4c72b0", \
       "" using (strcol(1) eq b && $7 != 0 ? $2 - 0.35 : NaN):3:(0.7):($4 - $3) skip 1 \
         with vectors head filled size 0.08,20 lw 1.5 lc rgb "#c44e52", \
       "" using (strcol(1) eq b ? $2 : NaN):($3 + 0.42 * ($4 - $3)):8 skip 1 with labels font ",8" offset 0,-0.6
}
unset multiplot
