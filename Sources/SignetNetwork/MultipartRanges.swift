/// The answer to one request for several byte ranges (RFC 9110 §14.6, `multipart/byteranges`),
/// parsed as it arrives and checked strictly against what was asked, before any byte reaches
/// its reader:
///
/// - the ranges asked are ascending and apart; each part must start where the next range not
///   yet covered starts and end where one of the ranges asked ends (a server may coalesce
///   neighbouring ranges into one part, RFC 9110 §14.2), of a file of the same size, and hold
///   exactly that many bytes; a part out of order, overlapping, outside what was asked or of
///   another file is refused;
/// - the delimiters are the boundary the answer's `Content-Type` named; the preamble, each
///   part's header section and the epilogue are bounded (``preambleLimit``, ``headerLimit``,
///   ``epilogueLimit``), so an endless answer is refused rather than buffered;
/// - an answer that covers only the first ranges (a server that serves fewer than asked) ends
///   with ``covered`` below the count asked: the caller fetches the rest singly.
///
/// A `206` answer with a single `Content-Range` instead of parts (a server that coalesced every
/// range into one) is read with the same rules as one part.
package struct MultipartRanges {
    /// Most bytes before the first delimiter.
    static let preambleLimit = 1024
    /// Most bytes of one part's header section.
    static let headerLimit = 8192
    /// Most bytes after the closing delimiter.
    static let epilogueLimit = 1024
    /// Most bytes one part may hold between the ranges asked that it coalesces (RFC 9110
    /// §14.2 lets a server join ranges apart by less than a part's overhead; Signet asks for
    /// ranges at least 128 bytes apart).
    static let coalescedGapLimit: Int64 = 64 << 10

    /// Why the answer is not what was asked (the caller words the error).
    package struct Refused: Error {
        package let reason: String
        /// A part that coalesced ranges across more than ``coalescedGapLimit``: not a lie about
        /// the file, but an answer too costly to take (the caller asks for the ranges singly).
        var coalescedGap = false
    }

    private let asked: [ClosedRange<Int64>]
    private let total: Int64
    /// `--` and the boundary; nil for a single-range answer.
    private let delimiter: [UInt8]?
    /// How many of the ranges asked, from the first, the parts so far covered.
    package private(set) var covered = 0

    private enum State {
        /// Before the first delimiter (`bytes` read so far).
        case preamble(bytes: Int)
        /// A part's header lines (`bytes` so far; the part's `Content-Range` when seen).
        case headers(bytes: Int, range: (start: Int64, end: Int64, total: Int64)?)
        /// A part's body: the file offset of the next byte, and of its last.
        case body(next: Int64, end: Int64, ranges: Int)
        /// After a part's body: the line end, then a delimiter (`lines`: empty lines so far).
        case afterBody(lines: Int)
        /// After the closing delimiter (`bytes` of epilogue so far).
        case done(bytes: Int)
    }
    private var state: State
    /// The line being read (never more than the limit of the section it is in).
    private var line: [UInt8] = []

    /// A `multipart/byteranges` answer with `contentType`'s boundary.
    package init(contentType: String, asked: [ClosedRange<Int64>], total: Int64) throws {
        guard let boundary = Self.boundary(contentType) else {
            throw Refused(reason: "answered several ranges with Content-Type '\(contentType.prefix(120))', not multipart/byteranges with a boundary")
        }
        self.asked = asked
        self.total = total
        delimiter = Array(("--" + boundary).utf8)
        state = .preamble(bytes: 0)
    }

    /// A `206` answer with one `Content-Range` (every range asked coalesced into one part).
    init(single range: (start: Int64, end: Int64, total: Int64), asked: [ClosedRange<Int64>], total: Int64) throws {
        self.asked = asked
        self.total = total
        delimiter = nil
        state = .preamble(bytes: 0)
        state = try partStarts(range)
    }

    /// The `boundary` parameter of a `multipart/byteranges` type (RFC 2046 §5.1.1: 1 to 70
    /// characters, quoted or not); nil for any other type or a missing, empty or overlong one.
    static func boundary(_ contentType: String) -> String? {
        let fields = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let type = fields.first, type.lowercased() == "multipart/byteranges" else { return nil }
        for field in fields.dropFirst() {
            guard let equals = field.firstIndex(of: "="), field[..<equals].trimmingCharacters(in: .whitespaces).lowercased() == "boundary" else { continue }
            var value = field[field.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            guard (1...70).contains(value.utf8.count), value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F || $0 == 0x20 }) else { return nil }
            return value
        }
        return nil
    }

    /// The next bytes of the answer: the parts' bytes go to `sink` with the file offset of
    /// their first byte.
    package mutating func take(_ chunk: UnsafeRawBufferPointer, _ sink: (Int64, UnsafeRawBufferPointer) throws -> Void) throws {
        var index = 0
        while index < chunk.count {
            if case .body(let next, let end, let ranges) = state {
                let count = Int(min(Int64(chunk.count - index), end - next + 1))
                try sink(next, UnsafeRawBufferPointer(rebasing: chunk[index..<(index + count)]))
                index += count
                if next + Int64(count) > end {
                    covered = ranges
                    guard delimiter != nil else {
                        // One part, no delimiters: nothing may follow it.
                        guard index == chunk.count else { throw Refused(reason: "sent more bytes than the ranges it was asked for") }
                        state = .done(bytes: 0)
                        return
                    }
                    state = .afterBody(lines: 0)
                } else {
                    state = .body(next: next + Int64(count), end: end, ranges: ranges)
                }
                continue
            }
            if case .done(let bytes) = state {
                guard delimiter != nil, bytes + chunk.count - index <= Self.epilogueLimit else {
                    throw Refused(reason: "sent more bytes after the last part than the format allows")
                }
                state = .done(bytes: bytes + chunk.count - index)
                return
            }
            // A line of the preamble, of a part's headers or after a part.
            let byte = chunk[index]
            index += 1
            try count(1)
            if byte == 0x0A {
                if line.last == 0x0D { line.removeLast() }
                let complete = line
                line.removeAll(keepingCapacity: true)
                try lineRead(complete)
            } else {
                line.append(byte)
            }
        }
    }

    /// Whether the answer ended where it may: after the closing delimiter (or the single part).
    package func finish() throws {
        guard case .done = state else { throw Refused(reason: "ended in the middle of its multipart answer") }
    }

    /// Counts bytes of the section being read against its limit.
    private mutating func count(_ bytes: Int) throws {
        switch state {
        case .preamble(let read):
            guard read + bytes <= Self.preambleLimit else {
                throw Refused(reason: "sent a multipart answer without its boundary '\(String(decoding: (delimiter ?? []).dropFirst(2), as: UTF8.self))'")
            }
            state = .preamble(bytes: read + bytes)
        case .headers(let read, let range):
            guard read + bytes <= Self.headerLimit else { throw Refused(reason: "sent a part whose headers do not end within \(Self.headerLimit) bytes") }
            state = .headers(bytes: read + bytes, range: range)
        case .afterBody(let lines):
            guard line.count < Self.headerLimit else { throw Refused(reason: "sent more bytes after a part than its range") }
            state = .afterBody(lines: lines)
        case .body, .done: break
        }
    }

    private mutating func lineRead(_ text: [UInt8]) throws {
        guard let delimiter else { return }
        /// The line without transport padding (RFC 2046 §5.1.1 allows spaces and tabs after a delimiter).
        var trimmed = text[...]
        while let last = trimmed.last, last == 0x20 || last == 0x09 { trimmed = trimmed.dropLast() }
        switch state {
        case .preamble:
            if trimmed.elementsEqual(delimiter) { state = .headers(bytes: 0, range: nil) }
        case .headers(_, let range):
            if text.isEmpty {
                guard let range else { throw Refused(reason: "sent a part without a Content-Range") }
                state = try partStarts(range)
                return
            }
            let header = String(decoding: text, as: UTF8.self)
            guard let colon = header.firstIndex(of: ":") else { throw Refused(reason: "sent a part with a malformed header line") }
            guard header[..<colon].trimmingCharacters(in: .whitespaces).lowercased() == "content-range" else { return }
            guard range == nil, let parsed = ResponseHeaders.contentRange(header[header.index(after: colon)...].trimmingCharacters(in: .whitespaces)) else {
                throw Refused(reason: "sent a part with a second or malformed Content-Range")
            }
            if case .headers(let bytes, _) = state { state = .headers(bytes: bytes, range: parsed) }
        case .afterBody(let lines):
            if text.isEmpty {
                // The line end that belongs to the delimiter after the part's bytes.
                guard lines == 0 else { throw Refused(reason: "sent more bytes after a part than its range") }
                state = .afterBody(lines: 1)
            } else if trimmed.elementsEqual(delimiter) {
                guard covered < asked.count else { throw Refused(reason: "sent more parts than the ranges it was asked for") }
                state = .headers(bytes: 0, range: nil)
            } else if trimmed.elementsEqual(delimiter + Array("--".utf8)) {
                state = .done(bytes: 0)
            } else {
                throw Refused(reason: "sent more bytes after a part than its range")
            }
        case .body, .done: break
        }
    }

    /// A part that starts: it must begin where the next range not covered begins and end
    /// where one asked ends, in a file of the same size.
    private func partStarts(_ range: (start: Int64, end: Int64, total: Int64)) throws -> State {
        guard covered < asked.count, range.total == total, range.start == asked[covered].lowerBound,
            let last = asked[covered...].firstIndex(where: { $0.upperBound == range.end })
        else {
            let next = covered < asked.count ? "\(asked[covered].lowerBound)-\(asked[covered].upperBound)" : "none"
            throw Refused(reason: "answered with the part \(range.start)-\(range.end)/\(range.total) where the range \(next) of \(total) bytes was next")
        }
        // Coalescing may join neighbours, never bring a gap worth fetching (FORMAT §5: the
        // bytes between asked ranges are not added to what is kept or counted as needed).
        var gaps: Int64 = 0
        for index in covered..<last { gaps += asked[index + 1].lowerBound - asked[index].upperBound - 1 }
        guard gaps <= Self.coalescedGapLimit else {
            throw Refused(
                reason:
                    "answered with the part \(range.start)-\(range.end)/\(range.total), which coalesces \(last - covered + 1) ranges across \(gaps) bytes that were not asked for (at most \(Self.coalescedGapLimit))",
                coalescedGap: true)
        }
        return .body(next: range.start, end: range.end, ranges: last + 1)
    }
}
