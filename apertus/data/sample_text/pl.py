# ruff: noqa: E501  (a text bank: one natural sentence per line reads better than wrapped strings)
"""Polish (pl) text bank of the sample corpus."""

TOPICS = {
    "travel": [
        "Nocny pociąg z Zurychu do Wiednia odjeżdża tuż po dziewiątej i przyjeżdża w sam raz na śniadanie.",
        "Wielu podróżnych nie docenia, jak zimno może być na górskiej przełęczy, nawet w środku lata.",
        "Stare miasto jest na tyle małe, że można je zwiedzić pieszo w jedno popołudnie.",
        "Zarezerwowaliśmy skromny pensjonat przy porcie i obudził nas odgłos kutrów rybackich.",
        "Regionalny bilet kolejowy jest często tańszy niż kupowanie osobnego biletu na każdy przejazd.",
        "Przeprawa promem trwa około dwóch godzin, a w pogodne dni z pokładu widać wyspy.",
        "W niedziele lokalne autobusy kursują rzadziej, dlatego warto wcześniej sprawdzić rozkład jazdy.",
        "Szlak wspina się równomiernie przez lasy modrzewiowe, zanim wyjdzie na rozległą halę.",
        "Podróżowanie poza sezonem oznacza mniej turystów i niższe ceny noclegów.",
        "Małe muzeum obok dworca opowiada historię doliny i jej mieszkańców.",
        "Po długim dniu zwiedzania usiedliśmy na tarasie i patrzyliśmy, jak słońce zachodzi nad jeziorem.",
        "Warto mieć przy sobie trochę gotówki, bo nie każde schronisko górskie przyjmuje karty.",
    ],
    "cooking": [
        "Ciasto należy wyrabiać co najmniej dziesięć minut, aż stanie się gładkie i elastyczne.",
        "Szczypta soli podkreśla słodycz dojrzałych pomidorów.",
        "Zupa smakuje jeszcze lepiej następnego dnia, kiedy smaki zdążą się połączyć.",
        "Orzechy krótko prażymy na suchej patelni, aż zaczną pachnieć.",
        "Aby sos był lżejszy, połowę śmietany można zastąpić bulionem warzywnym.",
        "Mięso powinno odpocząć kilka minut przed krojeniem, żeby soki zostały w środku.",
        "Świeże zioła dodajemy dopiero na samym końcu, bo inaczej tracą aromat.",
        "Moja babcia w każdą sobotę rano piekła chleb, a cały dom pachniał wspaniale.",
        "Ziemniaki, cebula i odrobina sera wystarczą na rozgrzewający obiad w zimie.",
        "Ciasto jest gotowe, gdy drewniany patyczek wbity w środek wychodzi suchy.",
        "Sezonowe warzywa z targu są zwykle świeższe i tańsze niż te z supermarketu.",
        "Makaron gotujemy w dużej ilości osolonej wody i odcedzamy, gdy jest jeszcze lekko twardy.",
    ],
    "science": [
        "Woda podczas zamarzania zwiększa swoją objętość, dlatego lód unosi się na powierzchni jezior.",
        "Rośliny wykorzystują światło słoneczne, aby zamieniać dwutlenek węgla i wodę w cukier i tlen.",
        "Naukowcy przez trzy lata mierzyli temperaturę lodowca na różnych głębokościach.",
        "Światło słoneczne potrzebuje nieco ponad ośmiu minut, aby dotrzeć do Ziemi.",
        "Szczepionki uczą układ odpornościowy rozpoznawać patogen, zanim dojdzie do prawdziwej infekcji.",
        "Eksperyment powtórzono kilka razy, aby upewnić się, że wyniki są wiarygodne.",
        "Pszczoły za pomocą specjalnego tańca pokazują sobie nawzajem, gdzie znaleźć kwiaty.",
        "Dźwięk rozchodzi się w wodzie znacznie szybciej niż w powietrzu.",
        "Ludzki mózg zawiera miliardy komórek nerwowych połączonych w złożone sieci.",
        "Trzęsienia ziemi powstają, gdy płyty tektoniczne nagle przesuwają się wzdłuż uskoku.",
        "Dobra teoria naukowa formułuje przewidywania, które można sprawdzić za pomocą obserwacji.",
        "Nowy teleskop pozwala astronomom obserwować galaktyki, które powstały wkrótce po Wielkim Wybuchu.",
    ],
    "local_news": [
        "We wtorek wieczorem rada gminy zatwierdziła budżet na remont szkoły podstawowej.",
        "Prace budowlane na głównej ulicy potrwają do końca października.",
        "W miniony weekend ponad dwustu wolontariuszy pomagało sprzątać brzeg rzeki.",
        "Od przyszłego miesiąca cotygodniowy targ przeniesie się na plac przed kościołem.",
        "Biblioteka miejska wydłużyła godziny otwarcia i jest teraz czynna także w sobotnie popołudnia.",
        "Mieszkańców zaproszono na otwarte spotkanie w sprawie planowanej ścieżki rowerowej.",
        "Podczas burzy strażacy dwukrotnie wyjeżdżali do usuwania powalonych drzew.",
        "Wieś uczciła ponowne otwarcie odnowionego mostu muzyką i małym festynem.",
        "Nowa linia autobusowa połączy dzielnice peryferyjne z dworcem kolejowym.",
        "Burmistrz podziękował wszystkim stowarzyszeniom za ich zaangażowanie na rzecz lokalnej społeczności.",
        "Basen miejski pozostanie zamknięty tego lata z powodu pilnych napraw.",
        "Rodzice zebrali podpisy w sprawie bezpieczniejszego przejścia dla pieszych przed przedszkolem.",
    ],
    "technology": [
        "Regularne aktualizacje oprogramowania usuwają luki bezpieczeństwa, które mogliby wykorzystać napastnicy.",
        "Dobre hasło powinno być długie i nigdy nie powinno być używane do więcej niż jednego konta.",
        "Wiele małych firm przechowuje dziś swoje dane w chmurze zamiast na własnych serwerach.",
        "Nowy smartfon ma większą baterię, ale jest wyraźnie cięższy od poprzednika.",
        "Oprogramowanie otwarte może być przeglądane, zmieniane i udostępniane przez każdego.",
        "Przed zakupem nowego laptopa warto się zastanowić, do czego naprawdę będzie potrzebny.",
        "Kopia zapasowa ma sens tylko wtedy, gdy regularnie sprawdzamy, czy da się ją rzeczywiście odtworzyć.",
        "Samochody elektryczne zyskują na popularności w miarę rozwoju sieci stacji ładowania.",
        "Szkoła wprowadziła tablety na lekcjach i przeszkoliła nauczycieli w ich obsłudze.",
        "Modele językowe są trenowane na dużych zbiorach tekstów i uczą się przewidywać kolejne słowo.",
        "Wolne połączenie z internetem często wynika ze starego routera, a nie z winy dostawcy.",
        "Miasto testuje czujniki, które pokazują kierowcom wolne miejsca parkingowe.",
    ],
    "history": [
        "Zamek zbudowano w trzynastym wieku, aby kontrolować szlak handlowy przez przełęcz.",
        "Przez stulecia klasztor był najważniejszym ośrodkiem nauki w regionie.",
        "Kolej dotarła do doliny w 1889 roku i na zawsze zmieniła życie jej mieszkańców.",
        "W dziewiętnastym wieku wiele rodzin wyemigrowało do Ameryki z powodu biedy i głodu.",
        "Stary ratusz przetrwał wielki pożar, który zniszczył większość okolicznych domów.",
        "Podczas budowy nowego parkingu archeolodzy znaleźli rzymskie monety i ceramikę.",
        "Pierwsza pisemna wzmianka o wsi pochodzi z dokumentu z 1150 roku.",
        "W czasie wojny most miał duże znaczenie strategiczne dla obu stron.",
        "Druk sprawił, że książki stały się tańsze, i pomógł nowym ideom rozprzestrzenić się po Europie.",
        "Kobiety w tym kraju uzyskały prawo wyborcze dopiero po długiej walce politycznej.",
        "Muzeum prezentuje narzędzia i ubrania, które pokazują, jak żyli chłopi dwieście lat temu.",
        "Kanał wykopano ręcznie, a prace trwały prawie dwadzieścia lat.",
    ],
    "sport": [
        "Gospodarze wygrali mecz dwa do jednego dzięki bramce w ostatniej minucie.",
        "Tysiące biegaczy wzięło udział w miejskim maratonie mimo deszczu.",
        "Narciarstwo biegowe jest jednym z najbardziej wymagających sportów wytrzymałościowych.",
        "Młody tenisista po raz pierwszy dotarł do finału turnieju.",
        "Wyścig kolarski prowadzi przez trzy górskie przełęcze i kończy się stromym podjazdem.",
        "Regularna aktywność fizyczna poprawia nie tylko kondycję, ale także nastrój i sen.",
        "Trener pochwalił zawodników za dyscyplinę i ducha zespołu.",
        "Nowa hala sportowa od jesieni będzie do dyspozycji szkół i klubów.",
        "Sezon hokejowy zaczyna się we wrześniu i kończy wiosną fazą play-off.",
        "Pływanie to łagodny sport, odpowiedni dla ludzi w każdym wieku.",
        "Miejscowy klub piłkarski szuka wolontariuszy do trenowania drużyn młodzieżowych.",
        "Po poważnej kontuzji zawodniczka potrzebowała prawie roku, aby wrócić do rywalizacji.",
    ],
    "nature": [
        "Jesienią modrzewie przybierają złotożółty kolor, zanim zgubią igły.",
        "Koziorożec alpejski prawie zniknął z Alp, ale powrócił dzięki programom ochrony.",
        "Mokradła magazynują duże ilości wody i są siedliskiem wielu rzadkich gatunków.",
        "Lodowiec w ciągu ostatnich pięćdziesięciu lat stracił ponad jedną trzecią swojej objętości.",
        "Świstaki przesypiają długie zimowe miesiące w norach głęboko pod ziemią.",
        "Wczesnym latem dzikie kwiaty pokrywają łąki i przyciągają niezliczone owady.",
        "Rzeka odzyskała bardziej naturalny bieg i ryby do niej wróciły.",
        "Ptaki drapieżne wykorzystują ciepłe prądy powietrza, aby godzinami szybować bez machania skrzydłami.",
        "Las chroni położoną niżej wieś przed lawinami i spadającymi kamieniami.",
        "Turystów prosi się, aby nie schodzili ze szlaków i nie niepokoili dzikich zwierząt.",
        "W wyjątkowo mroźne zimy jezioro zamarza, ale lód rzadko jest na tyle gruby, by można było po nim chodzić.",
        "Grzyby odgrywają w lesie ważną rolę, ponieważ rozkładają martwe drewno.",
    ],
}

TITLES = {
    "travel": [
        "Weekend w górach",
        "Porady dla podróżujących poza sezonem",
        "Pociągiem wzdłuż jeziora",
    ],
    "cooking": [
        "Nasze ulubione zimowe przepisy",
        "Domowy chleb krok po kroku",
        "Proste gotowanie z warzywami sezonowymi",
    ],
    "science": ["Jak mierzy się lodowce", "Dlaczego lód pływa", "Nowości z astronomii"],
    "local_news": [
        "Wieści z rady gminy",
        "Remont głównej ulicy",
        "Festyn z okazji otwarcia nowego mostu",
    ],
    "technology": [
        "Jak tworzyć bezpieczne hasła",
        "Czy chmura opłaca się małym firmom",
        "Testujemy nowy smartfon",
    ],
    "history": [
        "Historia naszej doliny",
        "Kiedy przyjechała kolej",
        "Skarby z muzeum regionalnego",
    ],
    "sport": [
        "Relacja z maratonu miejskiego",
        "Zwycięstwo gospodarzy w ostatniej minucie",
        "Sporty zimowe dla początkujących",
    ],
    "nature": ["Jesień w modrzewiowym lesie", "Powrót koziorożca", "Chrońmy nasze mokradła"],
}

SECTIONS = {
    "travel": "podroze",
    "cooking": "przepisy",
    "science": "nauka",
    "local_news": "wiadomosci",
    "technology": "technologia",
    "history": "historia",
    "sport": "sport",
    "nature": "przyroda",
}

TOXIC = [
    "Jesteś żałosnym idiotą i nikt nie chce czytać twoich bzdur.",
    "Zamknij się wreszcie, bezmózgi kretynie, i wracaj pod swój kamień.",
    "Tylko skończony imbecyl mógł napisać tak bezwartościowe śmieci.",
    "Spadaj, nędzny nieudaczniku, nikt tutaj cię nie znosi.",
    "Ty obrzydliwy błaźnie, od twoich głupich opinii robi mi się niedobrze.",
    "Jesteś tylko bezużytecznym śmieciem, wynoś się i nigdy nie wracaj.",
    "Nikogo nie obchodzisz ani ty, ani twoje żałosne życie, głupku.",
    "Wszyscy wiedzą, że jesteś kłamliwym i tchórzliwym mięczakiem.",
    "Twój mózg musi mieć wielkość ziarnka grochu, ty tępy idioto.",
    "Przestań wrzucać te swoje idiotyczne bzdury, ty irytujący trollu.",
    "Jesteś za głupi, żeby cokolwiek zrozumieć, więc zamknij tę swoją gębę.",
    "Ten autor to bezczelny oszust i kompletny nieudacznik.",
]

BOILERPLATE = {
    "cookie": (
        "Ta strona używa plików cookies, aby poprawić komfort korzystania z serwisu. Kontynuując "
        "przeglądanie, zgadzasz się na używanie plików cookies."
    ),
    "cookie_buttons": ["Akceptuję wszystkie", "Tylko niezbędne pliki cookies", "Ustawienia"],
    "nav": [
        "Strona główna",
        "Aktualności",
        "O nas",
        "Usługi",
        "Blog",
        "Sklep",
        "Kontakt",
        "Regulamin",
        "Prywatność",
        "Zaloguj się",
    ],
    "read_more": "Czytaj dalej",
    "related": "Podobne artykuły",
    "share": "Udostępnij artykuł",
    "newsletter": "Zapisz się do newslettera",
    "rights": "Wszelkie prawa zastrzeżone.",
    "back_to_top": "Do góry",
}

SPAM = [
    "tanio",
    "kup teraz",
    "najlepsza cena",
    "rabat",
    "darmowa dostawa",
    "sklep internetowy",
    "wyprzedaż",
    "zamów dziś",
    "buty",
    "zegarki",
    "okazja",
    "super promocje",
]

PII = {
    "email": "Pytania dotyczące tego artykułu prosimy kierować na adres {email}.",
    "phone": "Z naszym biurem można się skontaktować pod numerem {phone_national}, a z zagranicy pod numerem {phone_international}.",
    "ipv4": "Podczas awarii serwer {ipv4} był niedostępny przez kilka godzin.",
    "ipv6": "Nasza strona jest dostępna także przez IPv6 pod adresem {ipv6}.",
    "iban": "Darowizny na rzecz stowarzyszenia można wpłacać na konto {iban}.",
}

LOOKALIKES = {
    "version": "Wersja {version} aplikacji z rozkładem jazdy jest dostępna od {date_iso}.",
    "build": "Dnia {date_local} komputery w bibliotece zaktualizowano do kompilacji {build}.",
    "price": "Drukowany przewodnik kosztuje {price} i można go zamówić, podając numer ISBN {isbn}.",
    "address": "Punkt informacji turystycznej jest czynny od {time_open} do {time_close}, adres: {postcode} {city}.",
}

FOOTER = "Artykuł został ostatnio sprawdzony przez naszą redakcję."

LOCALE = {
    "country": "PL",
    "mail_names": [
        "anna.kowalska",
        "piotr.nowak",
        "biuro",
        "redakcja",
        "katarzyna.wisniewska",
        "tomasz.wojcik",
    ],
    "cities": [
        ("00-001", "Warszawa"),
        ("31-005", "Kraków"),
        ("80-831", "Gdańsk"),
        ("40-001", "Katowice"),
    ],
    "date_local": "{d:02d}.{m:02d}.{y}",
    "price": "{units},{cents:02d} zł",
    "isbn_group": "83",
}
