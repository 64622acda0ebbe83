import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetNetwork

/// Issue 40, point 3: the reader of `multipart/byteranges` answers, on its own, with bodies cut
/// into chunks at every position (a part's headers, its bytes and a delimiter split across reads
/// as a network delivers them).
@Suite("Multipart range answers: parsed as they arrive, checked against what was asked")
struct MultipartRangesTests {
    static let file: [UInt8] = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
    static let asked: [ClosedRange<Int64>] = [0...9, 100...109, 5000...5009]

    static func part(_ boundary: String, _ range: ClosedRange<Int64>, lead: String = "\r\n") -> [UInt8] {
        Array("\(lead)--\(boundary)\r\nContent-Type: application/zip\r\nContent-Range: bytes \(range.lowerBound)-\(range.upperBound)/200000\r\n\r\n".utf8)
            + file[Int(range.lowerBound)...Int(range.upperBound)]
    }

    /// Feeds `body` in chunks of `step` bytes; the bytes received per offset, and the parser.
    static func feed(_ body: [UInt8], type: String, step: Int, asked: [ClosedRange<Int64>] = asked) throws -> (bytes: [Int64: [UInt8]], parser: MultipartRanges)
    {
        var parser = try MultipartRanges(contentType: type, asked: asked, total: 200_000)
        var bytes: [Int64: [UInt8]] = [:]
        var start = 0
        while start < body.count {
            let end = min(body.count, start + step)
            try body[start..<end].withUnsafeBytes { chunk in
                try parser.take(chunk) { offset, data in
                    // Contiguous bytes of one part are kept under the part's first offset.
                    if let first = bytes.keys.first(where: { $0 + Int64(bytes[$0]!.count) == offset }) {
                        bytes[first]! += Array(data)
                    } else {
                        bytes[offset] = Array(data)
                    }
                }
            }
            start = end
        }
        try parser.finish()
        return (bytes, parser)
    }

    @Test("nginx's and lighttpd's layouts, cut at every position, give exactly the ranges asked")
    func honestAnswers() throws {
        let nginx = Self.asked.flatMap { Self.part("00000000000000000001", $0) } + Array("\r\n--00000000000000000001--\r\n".utf8)
        let lighttpd =
            Self.part("fkj49sn38dcn3", Self.asked[0], lead: "") + Self.asked.dropFirst().flatMap { Self.part("fkj49sn38dcn3", $0) }
            + Array("\r\n--fkj49sn38dcn3--\r\n".utf8)
        for (body, boundary) in [(nginx, "00000000000000000001"), (lighttpd, "fkj49sn38dcn3")] {
            for step in [1, 2, 3, 7, 10, 64, body.count] {
                let (bytes, parser) = try Self.feed(body, type: "multipart/byteranges; boundary=\(boundary)", step: step)
                #expect(parser.covered == 3)
                #expect(
                    bytes == Dictionary(uniqueKeysWithValues: Self.asked.map { ($0.lowerBound, Array(Self.file[Int($0.lowerBound)...Int($0.upperBound)])) }),
                    "step \(step)")
            }
        }
    }

    @Test("coalesced parts, a quoted boundary and fewer parts than asked are read as what they are")
    func otherAnswers() throws {
        let coalesced = Self.part("q u", 0...109) + Self.part("q u", 5000...5009) + Array("\r\n--q u--\r\n".utf8)
        let (bytes, parser) = try Self.feed(coalesced, type: "multipart/byteranges; boundary=\"q u\"", step: 5)
        #expect(parser.covered == 3 && bytes[0]?.count == 110 && bytes[5000]?.count == 10)
        let fewer = Self.part("b", 0...9) + Self.part("b", 100...109) + Array("\r\n--b--\r\n".utf8)
        #expect(try Self.feed(fewer, type: "multipart/byteranges;boundary=b", step: 3).parser.covered == 2)
        var single = try MultipartRanges(single: (0, 5009, 200_000), asked: Self.asked, total: 200_000)
        try Array(Self.file[0...5009]).withUnsafeBytes { try single.take($0) { _, _ in } }
        try single.finish()
        #expect(single.covered == 3)
    }

    @Test("lying answers are refused, whatever the chunking")
    func lyingAnswers() throws {
        let b = "b", type = "multipart/byteranges; boundary=b", close = Array("\r\n--b--\r\n".utf8)
        let cases: [(String, [UInt8], String)] = [
            ("reordered", Self.part(b, 100...109) + Self.part(b, 0...9) + Self.part(b, 5000...5009) + close, "where the range"),
            ("not asked", Self.part(b, 0...9) + Self.part(b, 101...110) + Self.part(b, 5000...5009) + close, "where the range"),
            ("overlapping", Self.part(b, 0...9) + Self.part(b, 0...109) + close, "where the range"),
            ("another size", Array("\r\n--b\r\nContent-Range: bytes 0-9/200001\r\n\r\n".utf8) + Self.file[0...9] + close, "where the range"),
            ("a byte more", Self.part(b, 0...9) + [0x41] + Self.part(b, 100...109) + close, "more bytes after a part"),
            ("repeated", Self.asked.flatMap { Self.part(b, $0) } + Self.part(b, 0...9) + close, "more parts"),
            ("no Content-Range", Array("\r\n--b\r\nContent-Type: x\r\n\r\n".utf8) + close, "without a Content-Range"),
            ("two Content-Ranges", Array("\r\n--b\r\nContent-Range: bytes 0-9/200000\r\nContent-Range: bytes 0-9/200000\r\n\r\n".utf8), "second or malformed"),
            ("unclosed", Self.asked.flatMap { Self.part(b, $0) }, "ended in the middle"),
            ("wrong boundary", Self.asked.flatMap { Self.part("c", $0) } + close, "ended in the middle"),
            ("wrong boundary, long", Self.asked.flatMap { Self.part("c", $0) } + Array(repeating: 0x0A, count: 1100) + close, "without its boundary"),
            ("endless headers", Array("\r\n--b\r\n".utf8) + Array(repeating: 0x41, count: 9000), "headers do not end"),
            ("endless epilogue", Self.asked.flatMap { Self.part(b, $0) } + close + Array(repeating: 0x41, count: 2000), "after the last part")
        ]
        for (name, body, words) in cases {
            for step in [1, 9, body.count] {
                #expect(throws: MultipartRanges.Refused.self, "\(name), step \(step)") { try Self.feed(body, type: type, step: step) }
                do { _ = try Self.feed(body, type: type, step: step) } catch let refusal as MultipartRanges.Refused {
                    #expect(refusal.reason.contains(words), "\(name): \(refusal.reason)")
                }
            }
        }
        for type in [
            "multipart/mixed; boundary=b", "multipart/byteranges", "multipart/byteranges; boundary=",
            "multipart/byteranges; boundary=\(String(repeating: "x", count: 71))"
        ] {
            #expect(throws: MultipartRanges.Refused.self, "\(type)") { try MultipartRanges(contentType: type, asked: Self.asked, total: 200_000) }
        }
        // One part that ends where no range asked ends.
        #expect(throws: MultipartRanges.Refused.self) { try MultipartRanges(single: (0, 50, 200_000), asked: Self.asked, total: 200_000) }
    }

    /// Issue 48, point 12: a server that "coalesced" two ends of a file into one part sent
    /// 134.7 MB for 0.5 MB asked, all of it accepted and held. The gap a part may carry between
    /// asked ranges is bounded, whether the part is one of many or the whole answer.
    @Test("a part coalesced across more than 64 KiB that was not asked for is refused at its headers")
    func coalescedAcrossAGap() throws {
        let apart: [ClosedRange<Int64>] = [0...9, 70_000...70_009, 150_000...150_009]
        #expect(throws: MultipartRanges.Refused.self) { try MultipartRanges(single: (0, 150_009, 200_000), asked: apart, total: 200_000) }
        #expect(throws: MultipartRanges.Refused.self) { try MultipartRanges(single: (0, 70_009, 200_000), asked: apart, total: 200_000) }
        // Refused before any byte of the part is handed on.
        let body = Self.part("g", 0...70_009) + Self.part("g", 150_000...150_009) + Array("\r\n--g--\r\n".utf8)
        var handed = 0
        do {
            var parser = try MultipartRanges(contentType: "multipart/byteranges; boundary=g", asked: apart, total: 200_000)
            try body.withUnsafeBytes { try parser.take($0) { _, data in handed += data.count } }
            Issue.record("a part across a 69,990-byte gap was accepted")
        } catch let refusal as MultipartRanges.Refused {
            #expect(refusal.reason.contains("not asked for"), "\(refusal.reason)")
        }
        #expect(handed == 0)
        // Within the bound it is still read (a gap of 90 bytes joined, as in otherAnswers).
        let near: [ClosedRange<Int64>] = [0...9, 100...109, 60_000...60_009]
        var joined = try MultipartRanges(single: (0, 60_009, 200_000), asked: near, total: 200_000)
        try Array(Self.file[0...60_009]).withUnsafeBytes { try joined.take($0) { _, _ in } }
        try joined.finish()
        #expect(joined.covered == 3)
    }
}
