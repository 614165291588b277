# churn.pl — hash and string churn for the perl drop-in test. Deterministic
# (own generator, sorted output): prints counts and checksums only.
use strict;
use warnings;

my $x = 12345;
sub rnd { $x = ($x * 1103515245 + 12345) % 2147483648; return $x >> 8; }

# a hash that grows, loses a fifth of its keys and grows again
my %h;
for my $i (1 .. 300000) {
  my $k = sprintf("key%x", rnd() % 150000);
  if (rnd() % 5 == 0) { delete $h{$k}; next; }
  $h{$k} .= chr(97 + $i % 26) x (1 + rnd() % 9);
}
my $klen = 0;
$klen += length($h{$_}) for keys %h;
print "hash ", scalar(keys %h), " $klen\n";

# strings: build, split, substitute, join, sort
my @words = map { join("", map { chr(97 + rnd() % 26) } 1 .. (1 + rnd() % 10)) } 1 .. 100000;
my $text = join(" ", @words);
(my $upper = $text) =~ s/([aeiou])(\w)/\U$1\E$2$2/g;
my %seen;
$seen{$_}++ for split / /, $upper;
my @top = (sort { $seen{$b} <=> $seen{$a} || $a cmp $b } keys %seen)[0 .. 9];
print "text ", length($text), " ", length($upper), " ", scalar(keys %seen), " @top\n";
print "sum ", unpack("%32C*", join("|", sort keys %seen)), "\n";

# large strings and arrays: the allocator's big-block path
my @big;
for my $i (1 .. 20) {
  push @big, "x" x (100000 * $i);
  shift @big if @big > 4;
}
my @arr = map { $_ * 3 } 1 .. 500000;
splice(@arr, 1000, 200000);
print "big ", length($big[-1]), " ", scalar(@arr), " $arr[-1]\n";

# nested structures freed in bulk
my @recs = map { { id => $_, tags => [ map { "t$_" } 1 .. ($_ % 7) ], name => "n" x ($_ % 50) } } 1 .. 100000;
my $tags = 0;
$tags += @{ $_->{tags} } for @recs;
@recs = grep { $_->{id} % 3 } @recs;
print "recs ", scalar(@recs), " $tags\n";
