# Stacked bars of bench/memory_compare.sh's table (gnuplot -e "out='DIR'" bench/memory_charts.gp):
# memory per rank of each configuration, by part, the allocator's peak as the bar's height.
set terminal pngcairo size 1100,520 font ",10"
set datafile separator "\t"
set output out."/memory.png"
set title "GPT-mini, f16 parameters + AdamW: memory per rank at its peak (MiB)"
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.75
set key outside right
set ylabel "MiB"
set yrange [0:*]
set xtics rotate by -45 font ",9"
set grid ytics
plot out."/memory.tsv" using 5:xtic(1) title "parameters", \
  '' using 6 title "gradient buckets", \
  '' using 7 title "reduced gradient", \
  '' using 8 title "optimizer state", \
  '' using 9 title "activations kept for backward", \
  '' using 12 title "gathered units (stage 3)", \
  '' using 10 title "rest of the peak: temporaries, a block's recompute"
