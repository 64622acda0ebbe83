import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
import SignetTestSupport
import SignetCryptoTestSupport

/// Issue 40, point 1: content-defined chunks of large resources, in the signed manifest.
@Suite("Chunk indexes: FastCDC cuts, the manifest's field, strict parsing")
struct ChunkIndexTests {
    static func random(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return randomBytes(count, using: &generator)
    }

    static func chunk(_ bytes: [UInt8], step: Int) throws -> ChunkIndex {
        let chunker = try ContentChunker(blocks: .sha256Prefix)
        var start = 0
        while start < bytes.count {
            let end = min(bytes.count, start + step)
            try bytes[start..<end].withUnsafeBytes { try chunker.update($0) }
            start = end
        }
        return try chunker.finish()
    }

    @Test("cuts depend on the bytes only (not on how they arrive); every chunk hashes to its entry; sizes within bounds")
    func cuts() throws {
        let bytes = Self.random(6 << 20)
        let whole = try Self.chunk(bytes, step: bytes.count)
        for step in [1 << 10, 65_537, 1 << 20] { #expect(try Self.chunk(bytes, step: step) == whole, "step \(step)") }
        var offset = 0
        for (index, span) in whole.spans.enumerated() {
            #expect(span.offset == UInt64(offset))
            let digest = try Digest.compute(Array(bytes[offset..<(offset + Int(span.length))]), algorithm: .sha256)
            #expect(Array(whole.hash(index)) == digest.bytes)
            #expect(span.length <= UInt64(ContentChunker.maximum) && (index == whole.count - 1 || span.length >= UInt64(ContentChunker.minimum)))
            offset += Int(span.length)
        }
        #expect(offset == bytes.count)
        // Near the average: 6 MiB of random bytes in 40 to 200 chunks.
        #expect((40...200).contains(whole.count), "\(whole.count) chunks")
        // Zeros never match a mask: every chunk is cut at the maximum.
        let zeros = try Self.chunk([UInt8](repeating: 0, count: 1 << 20), step: 1 << 20)
        #expect(zeros.lengths == [UInt32](repeating: UInt32(ContentChunker.maximum), count: 4))
    }

    @Test("1 MiB inserted in the middle: the chunks after it are found again (content-defined)")
    func insertion() throws {
        let old = Self.random(8 << 20)
        let new = Array(old[..<(4 << 20)]) + Self.random(1 << 20) + Array(old[(4 << 20)...])
        let a = try Self.chunk(old, step: 1 << 20), b = try Self.chunk(new, step: 1 << 20)
        let known = Set((0..<a.count).map { Array(a.hash($0)) })
        let fresh = (0..<b.count).filter { !known.contains(Array(b.hash($0))) }.reduce(0) { $0 + Int(b.lengths[$1]) }
        #expect(fresh <= (1 << 20) + 2 * ContentChunker.maximum, "\(fresh) bytes in chunks not known before")
    }

    @Test("the manifest's string round-trips; a wrong one is refused with the reason")
    func parsing() throws {
        let bytes = Self.random(1 << 20)
        let index = try Self.chunk(bytes, step: 1 << 16)
        var parsed = try ChunkIndex(parsing: index.encoded, size: UInt64(bytes.count))
        try parsed.parseBlocks(index.encodedBlocks, size: UInt64(bytes.count))
        #expect(parsed == index && parsed.blockCount == 256)
        // One 4-byte hash per 4 KiB block: a block's hash is its SHA-256's first bytes.
        #expect(Array(index.block(3)) == Array(try Digest.compute(Array(bytes[12288..<16384]), algorithm: .sha256).bytes.prefix(4)))
        for (text, size, words) in [
            ("md5-4096:" + index.encodedBlocks.dropFirst(ChunkIndex.blockScheme.count), UInt64(bytes.count), "unknown scheme"),
            (index.encodedBlocks, UInt64(bytes.count) + 4096, "not one per"),
            (String(index.encodedBlocks.dropLast(8)), UInt64(bytes.count), "not one per")
        ] {
            var copy = parsed
            do {
                try copy.parseBlocks(String(text), size: size)
                Issue.record("blocks accepted: \(words)")
            } catch let refusal as ChunkIndex.Refused {
                #expect(refusal.reason.contains(words), "\(words): \(refusal.reason)")
            }
        }
        let body = String(index.encoded.dropFirst(ChunkIndex.scheme.count))
        var record = [UInt8](repeating: 0, count: ChunkIndex.recordSize)
        func encoded(_ lengths: [Int]) -> String {
            ChunkIndex.scheme
                + Data(
                    lengths.flatMap { length -> [UInt8] in
                        record[0] = UInt8(length >> 16); record[1] = UInt8(length >> 8 & 0xFF); record[2] = UInt8(length & 0xFF)
                        return record
                    }
                ).base64EncodedString()
        }
        let cases: [(String, UInt64, String)] = [
            ("gearcdc:" + body, UInt64(bytes.count), "unknown scheme"),
            (ChunkIndex.scheme + "!!!!", UInt64(bytes.count), "not whole records"),
            (ChunkIndex.scheme + String(body.dropLast(4)), UInt64(bytes.count), "not whole records"),
            (index.encoded, UInt64(bytes.count) + 1, "in all for a file of"),
            (encoded([100, 100]), 40_000, "a chunk of 100 bytes"),
            (encoded([0]), 0, "a chunk of 0 bytes"),
            (encoded([ContentChunker.maximum + 1]), UInt64(ContentChunker.maximum + 1), "a chunk of"),
            // More records than the file's size allows: refused before it is decoded.
            (encoded([Int](repeating: ContentChunker.minimum, count: 8)), UInt64(ContentChunker.minimum), "not whole records")
        ]
        for (text, size, words) in cases {
            do {
                _ = try ChunkIndex(parsing: text, size: size)
                Issue.record("accepted: \(words)")
            } catch let refusal as ChunkIndex.Refused {
                #expect(refusal.reason.contains(words), "\(words): \(refusal.reason)")
            }
        }
    }

    @Test("a manifest with a chunk index parses to it; a malformed one is a malformed manifest naming the file")
    func inManifest() throws {
        let bytes = Self.random(1 << 20)
        var file = Manifest.File(path: "big.img", size: UInt64(bytes.count), sha256: try Digest.compute(bytes, algorithm: .sha256).hex, mode: .regular)
        file.chunks = try Self.chunk(bytes, step: 1 << 20)
        let manifest = Manifest(
            algorithm: .rsaPKCS1v15SHA256, created: Timestamp(secondsSinceEpoch: 1_700_000_000), expires: nil, files: [file],
            keyID: try Fixtures.signingKey().keyID, name: "app", sequence: 1, version: "1")
        let encoded = try manifest.encoded()
        #expect(try Manifest.parse(encoded) == manifest)
        let text = String(decoding: encoded, as: UTF8.self).replacingOccurrences(of: "\"chunks\" : \"fastcdc1:", with: "\"chunks\" : \"fastcdc1:AAAA")
        let error = signetError { _ = try Manifest.parse(Array(text.utf8)) }
        #expect(error?.code == .malformedManifest && error?.reason.contains("big.img") == true, "\(error?.reason ?? "accepted")")
    }

    @Test(
        "a deflate index (issue 51) round-trips in a manifest; one length per 8 KiB segment, each 1 to 8,256 bytes, and never without a chunk index, else the manifest is malformed naming the file"
    )
    func deflateIndex() throws {
        let bytes = Self.random((1 << 20) + 1000)
        var file = Manifest.File(path: "big.img", size: UInt64(bytes.count), sha256: try Digest.compute(bytes, algorithm: .sha256).hex, mode: .regular)
        file.chunks = try Self.chunk(bytes, step: 1 << 20)
        var deflate = DeflateIndex()
        for index in 0..<DeflateIndex.segments(of: UInt64(bytes.count)) { deflate.append(compressedLength: 100 + index) }
        file.deflate = deflate
        let manifest = Manifest(
            algorithm: .rsaPKCS1v15SHA256, created: Timestamp(secondsSinceEpoch: 1_700_000_000), expires: nil, files: [file],
            keyID: try Fixtures.signingKey().keyID, name: "app", sequence: 1, version: "1")
        let encoded = try manifest.encoded()
        let parsed = try Manifest.parse(encoded)
        #expect(parsed == manifest && parsed.files[0].deflate?.offsets.last == UInt64((0..<129).reduce(0) { $0 + 100 + $1 }))
        let text = String(decoding: encoded, as: UTF8.self)
        let good = deflate.encoded
        func lengths(_ values: [Int]) -> String {
            DeflateIndex.scheme + Data(values.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xff)] }).base64EncodedString()
        }
        for (bad, words) in [
            ("zstd1:" + good.dropFirst(DeflateIndex.scheme.count), "unknown scheme"),
            (lengths(Array(repeating: 100, count: 128)), "one length per 8192-byte segment"),
            (lengths(Array(repeating: 100, count: 128) + [0]), "a deflate segment of 0 compressed bytes"),
            (lengths(Array(repeating: 100, count: 128) + [8257]), "a deflate segment of 8257"),
            (good + "=", "one length per")
        ] {
            let changed = text.replacingOccurrences(of: good, with: bad)
            let error = signetError { _ = try Manifest.parse(Array(changed.utf8)) }
            #expect(
                error?.code == .malformedManifest && error?.reason.contains("big.img") == true && error?.reason.contains(words) == true,
                "\(words): \(error?.reason ?? "accepted")")
        }
        // A deflate index without a chunk index.
        let alone = text.replacingOccurrences(of: "\"chunks\" : \"\(file.chunks!.encoded)\",\n", with: "")
            .replacingOccurrences(of: "\"blocks\" : \"\(file.chunks!.encodedBlocks)\",\n", with: "")
        #expect(alone != text)
        let error = signetError { _ = try Manifest.parse(Array(alone.utf8)) }
        #expect(error?.reason.contains("a deflate index without a chunk index") == true, "\(error?.reason ?? "accepted")")
    }

    @Test(
        "the chunk-index entry (issue 51): sections laid out in manifest order, slices bound by SHA-256 in the manifest, CRC-32 block hints; every defect of the manifest's fields is malformed, naming the file or field"
    )
    func entry() throws {
        let a = Self.random((1 << 20) + 5), b = Self.random(3 << 20)
        func file(_ path: String, _ bytes: [UInt8], deflated: Bool) throws -> Manifest.File {
            var file = Manifest.File(path: path, size: UInt64(bytes.count), sha256: try Digest.compute(bytes, algorithm: .sha256).hex, mode: .regular)
            let chunker = try ContentChunker()
            try bytes.withUnsafeBytes { try chunker.update($0) }
            file.chunks = try chunker.finish()
            if deflated {
                var deflate = DeflateIndex()
                for index in 0..<DeflateIndex.segments(of: file.size) { deflate.append(compressedLength: 200 + index % 50) }
                file.deflate = deflate
            }
            return file
        }
        let small = Manifest.File(path: "b.txt", size: 3, sha256: try Digest.compute(Array("hi\n".utf8), algorithm: .sha256).hex, mode: .regular)
        var files = [try file("a.img", a, deflated: true), small, try file("c.img", b, deflated: false)]
        let chunksA = files[0].chunks!, chunksC = files[2].chunks!, deflateA = files[0].deflate!
        // A block's hint is zlib's CRC-32 of its 4,096 bytes, big-endian.
        let crc = a[8192..<12288].withUnsafeBytes { ChunkIndex.crc32(0, $0) }
        #expect(chunksA.blockKey(2) == crc && chunksA.blockCount == 257 && chunksA.blockScheme == .crc32)
        let (entry, bytes) = try #require(try ChunkIndexEntry.make(&files))
        // The hints of a.img and c.img, then a.img's records and segment lengths, then c.img's records.
        // Records of 19 bytes in the entry: the length and the first 16 bytes of the SHA-256.
        let hints = 257 * 4 + 768 * 4, recordsA = chunksA.count * 19 + 129 * 2
        #expect(bytes.count == hints + recordsA + chunksC.count * 19 && entry.size == UInt64(bytes.count))
        #expect(Array(bytes[0..<4]) == Array(chunksA.blockHints[0..<4]) && Array(bytes[1028..<1032]) == Array(chunksC.blockHints[0..<4]))
        #expect(
            Array(bytes[hints..<(hints + 19)]) == Array(chunksA.records()[0..<19])
                && Array(bytes[(hints + 3)..<(hints + 19)]) == Array(chunksA.hash(0).prefix(16))
                && Array(bytes[(hints + chunksA.count * 19)..<(hints + chunksA.count * 19 + 2)]) == [0, 200])
        #expect(files[0].chunks == nil && files[0].indexed?.hintsOffset == 0 && files[2].indexed?.hintsOffset == 1028 && files[1].indexed == nil)
        #expect(files[0].indexed?.recordsOffset == UInt64(hints) && files[2].indexed?.recordsOffset == UInt64(hints + recordsA))
        #expect(entry.sliceCount == (bytes.count + 4095) / 4096)
        var manifest = Manifest(
            algorithm: .rsaPKCS1v15SHA256, created: Timestamp(secondsSinceEpoch: 1_700_000_000), expires: nil, files: files,
            keyID: try Fixtures.signingKey().keyID, name: "app", sequence: 1, version: "1")
        manifest.chunkIndex = entry
        let encoded = try manifest.encoded()
        let parsed = try Manifest.parse(encoded)
        #expect(parsed == manifest && parsed.files[2].indexed?.chunkBytes.upperBound == entry.size)
        let text = String(decoding: encoded, as: UTF8.self)
        #expect(text.contains("\"index\" : \"fastcdc1-sync8192-crc32:\(chunksA.count)\"") && text.contains("\"chunk_index\" : \"sha256-4096:"))
        // The sections read back from the entry's bytes as the device reads them.
        let records = try bytes[hints..<(hints + chunksA.count * 19)].withUnsafeBytes { try ChunkIndex(records: $0, size: UInt64(a.count), hashSize: 16) }
        #expect(records.spans.map(\.length) == chunksA.spans.map(\.length) && records.hash(3) == chunksA.hash(3).prefix(16))
        // A chunk's whole SHA-256 matches the 16 bytes kept, and only its own.
        let chunk3 = try Digest.compute(Array(a[Int(chunksA.spans[3].offset)..<Int(chunksA.spans[3].offset + chunksA.spans[3].length)]), algorithm: .sha256)
        #expect(records.matches(3, chunk3) && !records.matches(2, chunk3))
        let lengths = try bytes[(hints + chunksA.count * 19)..<(hints + recordsA)].withUnsafeBytes { try DeflateIndex(lengths: $0, size: UInt64(a.count)) }
        #expect(lengths == deflateA)
        let hashes = entry.encoded
        for (from, to, words) in [
            ("\"chunk_index\" : \"\(hashes)\",\n", "", "\"chunk_index\" is missing"),
            (":\(chunksA.count)\"", ":0\(chunksA.count)\"", "a.img"),
            (":\(chunksA.count)\"", ":1000\"", "a chunk index of 1000 chunks"),
            ("fastcdc1-sync8192-crc32:", "fastcdc2-crc32:", "unknown layout"),
            (hashes, "md5-4096:" + hashes.dropFirst(ChunkIndexEntry.scheme.count), "unknown scheme"),
            (hashes, String(hashes.dropLast(44)) + "====", "slice hashes")
        ] {
            let changed = text.replacingOccurrences(of: from, with: to)
            #expect(changed != text, "\(words)")
            let error = signetError { _ = try Manifest.parse(Array(changed.utf8)) }
            #expect(error?.code == .malformedManifest && error?.reason.contains(words) == true, "\(words): \(error?.reason ?? "accepted")")
        }
        // "chunk_index" with no file indexed, and a file indexed both inline and in the entry.
        var plain = manifest
        plain.files = [small]
        let stray = try plain.encoded()
        #expect(signetError { _ = try Manifest.parse(stray) }?.reason.contains("no file is indexed") == true)
        let both = text.replacingOccurrences(
            of: "\"index\" : \"fastcdc1-crc32", with: "\"chunks\" : \"\(chunksC.encoded)\",\n      \"index\" : \"fastcdc1-crc32")
        #expect(signetError { _ = try Manifest.parse(Array(both.utf8)) }?.reason.contains("both inline and in the chunk-index entry") == true)
    }
}
