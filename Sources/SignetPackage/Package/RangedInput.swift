import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetArchive
import SignetNetwork

/// A package on an HTTPS server, read with HTTP range requests instead of being downloaded
/// (FORMAT.md §5, "Range requests"): the archive layer reads it as it reads a file, with the
/// same checks, and nothing of it is stored on the device but, where the caller gives a
/// ``journal``, the answers in flight (for a run killed in the middle of one).
///
/// Every request goes over one reused connection and carries `If-Range` with the validator
/// of the first answer (a strong ETag, else Last-Modified), so a package replaced on the server
/// while it is read is never mixed with the old one: the server then answers 200, which is
/// refused. Each answer must be 206 for exactly the range asked, of a file of the same size,
/// with exactly that many bytes.
///
/// What is fetched: first the last ``probeSize`` bytes (the end records); then the central
/// directory, which is kept (with the 64 KiB before it, which libzip reads when it opens a
/// window of entries) while it is at most ``pinLimit``. Below the first `.signet/` entry (the
/// resources of a Signet package) nothing is fetched but the byte ranges a caller planned
/// (``plan(_:gap:exactGap:)``), read as they are needed: where the server answers several
/// ranges at once (``RangeClient/multipart``), exactly those ranges, up to ``maximumParts`` of
/// them and ``planRequest`` bytes in one request (``MultipartRanges`` checks the answer);
/// elsewhere each group of entries closer than ``gapLimit`` in one request of at most
/// ``planRequest`` bytes. Elsewhere (the package's own entries)
/// sequential reads fetch ahead, from the byte asked for, never before it. Memory is bounded:
/// the kept directory plus at most ``cacheLimit`` of fetched ranges.
package final class RangedInput: PlannedInput {
    /// The first request: the end records (22 bytes and a comment of up to 65,535) and, for
    /// most packages, the central directory.
    static let probeSize: Int64 = 22 + 65_535
    /// Bytes fetched at least per request outside planned ranges.
    static let blockSize: Int64 = 256 << 10
    /// Most blocks one such request fetches when reads go on sequentially.
    static let maximumRun: Int64 = 16
    /// Planned entries closer than this are fetched in one request, the gap read through.
    package static let gapLimit: Int64 = 64 << 10
    /// The same for the signature entries of the resources fetched: small entries among many
    /// that are not read (only the changed files' signature entries are fetched).
    package static let signatureGapLimit: Int64 = 4 << 10
    /// Most bytes one request for planned ranges asks for.
    static let planRequest: Int64 = 4 << 20
    /// Most ranges asked for in one request (Apache's default MaxRanges is 200; nginx has no
    /// limit; a longer Range header than this is refused by some proxies).
    static let maximumParts = 100
    /// Bytes each part of a multipart answer costs beyond its range (its delimiter and
    /// headers, about 100 bytes for nginx and Apache): planned ranges closer than this are
    /// asked for as one.
    package static let partOverhead: Int64 = 128
    /// Largest central directory kept whole.
    static let pinLimit: Int64 = 32 << 20
    /// Most fetched bytes kept besides the directory.
    package static let cacheLimit = 16 << 20

    package let path: String
    package let size: Int64
    /// The URL as given (``path`` is it without a password, for messages).
    package var url: String { client.url }
    private let client: RangeClient
    /// Fetched ranges, the most recently used last.
    private var cached: [(start: Int64, bytes: [UInt8])] = []
    private var cachedBytes = 0
    /// The central directory and what comes after it (and the 64 KiB before), kept.
    private var pinned: (start: Int64, bytes: [UInt8])?
    /// Below this offset only planned ranges are fetched (the first `.signet/` entry).
    private var floor: Int64 = 0
    /// Planned ranges, merged and sorted: for one request each, where the server cannot send
    /// several ranges in one answer.
    private var groups: [Range<Int64>] = []
    /// The planned ranges themselves, merged only where they touch or are apart by less than
    /// ``partOverhead``: asked for together, up to ``maximumParts`` and ``planRequest`` bytes
    /// in one request, where the server answers several ranges at once.
    private var exact: [Range<Int64>] = []
    private var run: Int64 = 1
    private var lastEnd: Int64 = -1

    /// Requests made and bytes received, for reports.
    package var requests: Int { client.requests }
    package var bytesReceived: UInt64 { client.bytesReceived }
    /// Called with the bytes of each answer as they arrive (progress displays), and with 0 on
    /// the transfer's ticks while none do.
    package var received: ((Int) -> Void)? = nil {
        didSet { client.onTick = received.map { report in { report(0) } } }
    }
    /// Where answers are also written as they arrive, for a run killed before it used them.
    package var journal: RangeJournal? = nil
    /// Bytes taken from an earlier run's journal (``preload(_:)``), not asked for again.
    package private(set) var preloaded: UInt64 = 0

    /// Opens `url`: one request for the last ``probeSize`` bytes, which tells the size and the
    /// validator. Throws ``RangeClient/Unsupported`` when the server does not answer range
    /// requests (or gives no validator to pin them to one file): the caller downloads the
    /// whole package.
    /// A server that answers the first request with the whole package: with `whole`, its body
    /// streams into that full download, which ``RangeClient/Unsupported/download`` then holds.
    package init(url: String, options: DownloadOptions, cancelled: CancellationFlag? = nil, whole: Downloader.FullDownload? = nil) throws {
        client = try RangeClient(url: url, options: options, cancelled: cancelled)
        client.whole = whole
        path = Download.redacted(url)
        var tail: [UInt8] = []
        let (start, total) = try client.probe(suffix: Self.probeSize, restart: { tail.removeAll() }) { tail.append(contentsOf: $0) }
        size = total
        remember(start, tail)
        lastEnd = start + Int64(tail.count)
    }

    /// The validator every request is pinned to (`If-Range`): the package as the first answer
    /// served it. Nil before the first answer.
    package var validator: String? { client.validator }

    /// Keeps the directory's bytes, and learns where the package's own entries start.
    package func directoryRead(_ directory: CentralDirectory.Directory) throws {
        // A package laid out otherwise (a bare one, or another tool's) has no such line: then
        // only the directory is above it. The package's own entries other than per-file
        // signatures are read whole: planned exactly, so that reading ahead never runs on into
        // the signature entries, most of which an update does not read.
        let own = Self.ownEntries(of: directory)
        floor = own.floor
        plan(own.spans)
        let start = max(0, Int64(directory.offset) - 65_557)
        guard size - start <= Self.pinLimit else { return }
        var bytes = [UInt8](repeating: 0, count: Int(size - start))
        let done = try bytes.withUnsafeMutableBytes { try read(fullyAt: start, into: $0) }
        guard done == bytes.count else { return }
        pinned = (start, bytes)
        // What the cache held of it is now kept twice: drop it.
        cached.removeAll { $0.start >= start }
        cachedBytes = cached.reduce(0) { $0 + $1.bytes.count }
    }

    /// Ranges that will be read: entries to fetch, merged with each other where closer than
    /// `gap` (``gapLimit`` unless said: a gap read through costs less than another request),
    /// then with those planned before where they touch.
    /// `exactGap` is the gap read through where several ranges go in one request: only a part's
    /// own overhead for resources, more for signature entries (metadata, small and many).
    package func plan(_ ranges: [Range<Int64>], gap: Int64, exactGap: Int64) {
        func merge(_ ranges: [Range<Int64>], gap: Int64) -> [Range<Int64>] {
            var merged: [Range<Int64>] = []
            for range in ranges.filter({ !$0.isEmpty }).sorted(by: { $0.lowerBound < $1.lowerBound }) {
                if let last = merged.last, range.lowerBound <= last.upperBound + gap {
                    merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
                } else {
                    merged.append(range)
                }
            }
            return merged
        }
        groups = merge(groups + merge(ranges, gap: gap), gap: 0)
        exact = merge(exact + merge(ranges, gap: exactGap), gap: 0)
    }

    /// The planned ranges from `position` on that are not held yet, for one request: the
    /// one holding `position` (from there), then the next ones, up to ``maximumParts`` ranges
    /// and ``planRequest`` bytes. Empty when `position` is in no planned range.
    private func spans(from position: Int64) -> [ClosedRange<Int64>] {
        guard let first = exact.firstIndex(where: { $0.upperBound > position }), exact[first].lowerBound <= position else { return [] }
        let held = holders
        let end = unheld(position..<exact[first].upperBound, held: held).map { max($0.upperBound, position + 1) } ?? exact[first].upperBound
        var spans: [ClosedRange<Int64>] = [position...(end - 1)]
        var bytes = end - position
        let most = min(Self.maximumParts, client.partsPerRequest ?? Self.maximumParts)
        for planned in exact[(first + 1)...] {
            // Ranges merge where they touch: a part already held (the kept directory, an
            // earlier answer) is not asked for again (the chunk-index entry read
            // by range touches the manifest, which touches the signatures).
            guard let range = unheld(planned, held: held) else { continue }
            guard spans.count < most, bytes + Int64(range.count) <= Self.planRequest else { break }
            spans.append(range.lowerBound...(range.upperBound - 1))
            bytes += Int64(range.count)
        }
        return spans
    }

    /// The byte ranges held: the kept directory and each cached answer (made once per request
    /// planned, not once per range looked at).
    private var holders: [Range<Int64>] {
        var holders: [Range<Int64>] = cached.map { $0.start..<($0.start + Int64($0.bytes.count)) }
        if let pinned { holders.append(pinned.start..<(pinned.start + Int64(pinned.bytes.count))) }
        return holders
    }

    /// `range` without the bytes `holders` hold at its start and at its end; nil when all are held.
    private func unheld(_ range: Range<Int64>, held holders: [Range<Int64>]) -> Range<Int64>? {
        var lower = range.lowerBound, upper = range.upperBound
        var moved = true
        while moved && lower < upper {
            moved = false
            for holder in holders where holder.contains(lower) { lower = holder.upperBound; moved = true }
        }
        moved = true
        while moved && lower < upper {
            moved = false
            for holder in holders where holder.contains(upper - 1) { upper = holder.lowerBound; moved = true }
        }
        return lower < upper ? lower..<upper : nil
    }

    /// Fetches `spans` in one request and keeps each part; false when the server would not
    /// answer several ranges at once (then nothing is kept and the caller asks for one).
    private func fetchSeveral(_ spans: [ClosedRange<Int64>]) throws -> Bool {
        var parts: [(start: Int64, bytes: [UInt8])] = []
        let report = received, journal = journal
        do {
            _ = try client.fetch(
                several: spans,
                restart: {
                    for part in parts { journal?.discard(part: part.start) }
                    parts.removeAll()
                }
            ) { offset, chunk in
                if let last = parts.last, last.start + Int64(last.bytes.count) == offset {
                    parts[parts.count - 1].bytes.append(contentsOf: chunk)
                } else {
                    parts.append((offset, Array(chunk)))
                }
                journal?.append(chunk, part: parts[parts.count - 1].start)
                report?(chunk.count)
            }
        } catch is RangeClient.SeveralUnsupported {
            return false
        } catch let failure as SignetError where (failure.code == .network || failure.code == .interrupted) && !parts.isEmpty && !client.refusedAnswer {
            // The link dropped inside a later part (a transport failure; an answer that broke
            // the rules is refused whole), or an interruption stopped it: the parts that arrived are kept, so that
            // what they hold is used (and written, for a resumed file) before the failure is
            // met again at the first byte they lack. Every byte is still checked
            // against the signed hashes where it is used.
            for part in parts { remember(part.start, part.bytes) }
            if let last = parts.last { lastEnd = last.start + Int64(last.bytes.count) }
            guard let first = parts.first, first.start == spans[0].lowerBound else { throw failure }
            return true
        }
        for part in parts { remember(part.start, part.bytes) }
        if let last = parts.last { lastEnd = last.start + Int64(last.bytes.count) }
        return !parts.isEmpty
    }

    package func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard offset >= 0 else { return 0 }
        var done = 0
        while done < buffer.count, offset + Int64(done) < size {
            let position = offset + Int64(done)
            let count = try withRange(containing: position, wanted: Int64(buffer.count - done)) { start, bytes in
                let from = Int(position - start)
                let count = min(bytes.count - from, buffer.count - done)
                UnsafeMutableRawBufferPointer(rebasing: buffer[done..<(done + count)]).copyMemory(
                    from: UnsafeRawBufferPointer(rebasing: bytes[from..<(from + count)]))
                return count
            }
            done += count
        }
        return done
    }

    /// Runs `body` on kept or fetched bytes starting at or before `position` and holding it.
    private func withRange<R>(containing position: Int64, wanted: Int64, _ body: (Int64, UnsafeRawBufferPointer) -> R) throws -> R {
        if let pinned, position >= pinned.start, position - pinned.start < Int64(pinned.bytes.count) {
            return pinned.bytes.withUnsafeBytes { body(pinned.start, $0) }
        }
        if let index = cached.lastIndex(where: { position >= $0.start && position - $0.start < Int64($0.bytes.count) }) {
            let hit = cached[index]
            if index != cached.count - 1 { cached.remove(at: index); cached.append(hit) }
            return hit.bytes.withUnsafeBytes { body(hit.start, $0) }
        }
        if client.multipart != false, case let several = spans(from: position), several.count > 1,
            try fetchSeveral(several), let index = cached.lastIndex(where: { position >= $0.start && position - $0.start < Int64($0.bytes.count) })
        {
            let hit = cached[index]
            return hit.bytes.withUnsafeBytes { body(hit.start, $0) }
        }
        let end: Int64
        if let group = groups.first(where: { $0.contains(position) }) {
            // Not the group's held end (the kept tail of the package, an earlier answer).
            let upper = min(group.upperBound, position + Self.planRequest)
            end = unheld(position..<upper, held: holders).map { max($0.upperBound, position + 1) } ?? upper
        } else if position >= floor {
            // Reading on from where the last request ended: fetch further ahead each time.
            run = position == lastEnd ? min(run * 2, Self.maximumRun) : 1
            end = min(size, position + max(wanted, run * Self.blockSize), nextHeld(after: position))
        } else {
            // Unplanned bytes below the package's own entries: only what was asked, and not
            // what is held already (the first answer, when the directory is read with the bytes
            // before it).
            end = min(size, floor, position + max(wanted, 1), nextHeld(after: position))
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(end - position))
        let report = received, journal = journal
        do {
            try client.fetch(
                position, end - 1,
                restart: {
                    bytes.removeAll(keepingCapacity: true)
                    journal?.discard(part: position)
                }
            ) { chunk in
                bytes.append(contentsOf: chunk)
                journal?.append(chunk, part: position)
                report?(chunk.count)
            }
        } catch let failure as SignetError where (failure.code == .network || failure.code == .interrupted) && !bytes.isEmpty && !client.refusedAnswer {
            // The link dropped part-way (a transport failure): what arrived is used before the
            // failure is met again at the first byte it lacks, as for several ranges.
            lastEnd = position + Int64(bytes.count)
            remember(position, bytes)
            return bytes.withUnsafeBytes { body(position, $0) }
        }
        lastEnd = end
        remember(position, bytes)
        return bytes.withUnsafeBytes { body(position, $0) }
    }

    /// Where the next kept or cached bytes after `position` start (the end of the file if
    /// none): a fetch stops there rather than fetch them again.
    private func nextHeld(after position: Int64) -> Int64 {
        var next = size
        if let pinned, pinned.start > position { next = pinned.start }
        for range in cached where range.start > position { next = min(next, range.start) }
        return next
    }

    private func remember(_ start: Int64, _ bytes: [UInt8]) {
        cached.append((start, bytes))
        cachedBytes += bytes.count
        while cachedBytes > Self.cacheLimit, cached.count > 1 {
            let dropped = cached.removeFirst()
            cachedBytes -= dropped.bytes.count
            journal?.discard(part: dropped.start)
        }
    }

    /// Takes the bytes an earlier run's ``RangeJournal`` kept of this same package (the caller
    /// compared the validator and the size) as if they had just arrived: they are not asked for
    /// again. Used as any answer is, every byte checked where it is used.
    package func preload(_ parts: [(start: Int64, bytes: [UInt8])]) {
        for part in parts where !part.bytes.isEmpty && part.start >= 0 && part.start <= size - Int64(part.bytes.count) {
            remember(part.start, part.bytes)
            preloaded &+= UInt64(part.bytes.count)
        }
    }
}
